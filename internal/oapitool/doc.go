// Package oapitool pins oapi-codegen (v2.8.2) as a tool of its own module,
// apart from the product's go.mod: app's TestGeneratedClientAndLoginOnTheDevStack
// runs `go tool oapi-codegen` here to generate a Go client from the served
// OpenAPI document. It holds no code.
package oapitool
