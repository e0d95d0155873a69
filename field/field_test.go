package field

import (
	"errors"
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"a", true},
		{"risk", true},
		{"fraud-scorer", true},
		{"a1", true},
		{"a-1", true},
		{"a--b", true},
		{"a" + strings.Repeat("b", 62), true}, // 63 characters
		{"a" + strings.Repeat("-", 61) + "b", true},
		{"", false},
		{"a" + strings.Repeat("b", 63), false}, // 64 characters
		{"1abc", false},
		{"-abc", false},
		{"abc-", false},
		{"Abc", false},
		{"aBc", false},
		{"a_b", false},
		{"a.b", false},
		{"a b", false},
		{" a", false},
		{"a ", false},
		{"a\n", false},
		{"\na", false},
		{"a/b", false},
		{"..", false},
		{"café", false},
		{"a\x00", false},
		{"ａ", false}, // full-width a
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			var errs Errors
			Name(&errs, "name", tt.in)
			if got := len(errs) == 0; got != tt.want {
				t.Fatalf("Name(%q) accepted = %v, want %v (errors %v)", tt.in, got, tt.want, errs)
			}
			if !tt.want && (len(errs) != 1 || errs[0].Field != "name") {
				t.Errorf("Name(%q) errors = %+v, want one error for field name", tt.in, errs)
			}
		})
	}
}

func TestVersionName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"v1", true},
		{"1", true},
		{"V42", true},
		{"2024-06-01.1", true},
		{"v1_rc.2", true},
		{"v1.", true},
		{"a" + strings.Repeat("b", 62), true}, // 63 characters
		{"", false},
		{"a" + strings.Repeat("b", 63), false}, // 64 characters
		{".v1", false},
		{"-v1", false},
		{"_v1", false},
		{".", false},
		{"..", false},
		{"v1/../x", false},
		{"v1/x", false},
		{"v 1", false},
		{"v1\n", false},
		{"v1:latest", false},
		{"v1+build", false},
		{"vé", false},
		{"v1\x00", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			var errs Errors
			VersionName(&errs, "metadata.name", tt.in)
			if got := len(errs) == 0; got != tt.want {
				t.Fatalf("VersionName(%q) accepted = %v, want %v (errors %v)", tt.in, got, tt.want, errs)
			}
			if !tt.want && (len(errs) != 1 || errs[0].Field != "metadata.name") {
				t.Errorf("VersionName(%q) errors = %+v, want one error for field metadata.name", tt.in, errs)
			}
		})
	}
}

func TestOneOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"batch", true},
		{"critical", true},
		{"", false},
		{"Batch", false},
		{"batch ", false},
	}
	for _, tt := range tests {
		var errs Errors
		OneOf(&errs, "tier", tt.in, "critical", "standard", "batch")
		if got := len(errs) == 0; got != tt.want {
			t.Errorf("OneOf(%q) accepted = %v, want %v", tt.in, got, tt.want)
		}
		if !tt.want && errs[0].Message != "must be one of critical, standard, batch" {
			t.Errorf("OneOf(%q) message = %q, want %q", tt.in, errs[0].Message, "must be one of critical, standard, batch")
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	var errs Errors
	if err := errs.Err(); err != nil {
		t.Fatalf("empty Errors.Err() = %v, want nil", err)
	}
	errs.Add("name", "is required")
	errs.Add("weights[%d]", "must sum to %d", 100) // the field is not a format
	err := errs.Err()
	if err == nil {
		t.Fatal("Err() = nil, want an error")
	}
	if got, want := err.Error(), "invalid input: name: is required; weights[%d]: must sum to 100"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var ve Errors
	if !errors.As(wrap(err), &ve) || len(ve) != 2 || ve[0].Field != "name" {
		t.Errorf("errors.As(wrapped) = %+v, want the two field errors", ve)
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "outer: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func wrap(err error) error { return wrapped{err} }
