// Package app assembles modelplane's processes from the domain packages: it
// reads each command's configuration, builds the dependencies with their
// constructors, runs them and shuts them down in order. cmd/modelplane only
// parses the command line and calls in here. app holds no business rules.
package app
