// Package web holds the portal's templ components: pages and the fragments
// htmx swaps, which are the same components the full pages render. It takes
// typed view structs that handlers fill and imports no domain or db package.
package web
