// Package field holds the input rules that several domain packages share
// (names of teams, models, endpoints and versions) and the field error type
// they return, which the HTTP layer turns into a 400 naming each field. It
// knows nothing about HTTP or storage.
package field

import (
	"fmt"
	"regexp"
	"strings"
)

// FieldError is one invalid input field.
type FieldError struct {
	Field   string
	Message string
}

// Errors is a non-empty list of field errors; it is an error.
type Errors []FieldError

func (e Errors) Error() string {
	parts := make([]string, len(e))
	for i, f := range e {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Add appends a field error.
func (e *Errors) Add(field, format string, args ...any) {
	*e = append(*e, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err returns e as an error, or nil when it is empty.
func (e Errors) Err() error {
	if len(e) == 0 {
		return nil
	}
	return e
}

var dnsLabel = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Name checks a DNS-label-like name: lower-case letters, digits and hyphens,
// starting with a letter, at most 63 characters. Endpoint names become URL path
// segments and host-like identifiers, so the rule is strict.
func Name(errs *Errors, field, v string) {
	if !dnsLabel.MatchString(v) {
		errs.Add(field, "must be 1-63 lower-case letters, digits or '-', start with a letter and not end with '-'")
	}
}

var versionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// VersionName checks a model version name such as "v42" or "2024-06-01.1".
func VersionName(errs *Errors, field, v string) {
	if !versionName.MatchString(v) {
		errs.Add(field, "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
}

// OneOf checks that v is one of the allowed values.
func OneOf(errs *Errors, field, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	errs.Add(field, "must be one of %s", strings.Join(allowed, ", "))
}
