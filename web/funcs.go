package web

import (
	"strconv"
	"strings"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// noSchema is whether a JSON schema, as shown, declares nothing.
func noSchema(s string) bool {
	s = strings.TrimSpace(s)
	return s == "" || s == "{}" || s == "null"
}
