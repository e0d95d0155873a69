package web

// EnrollmentProps fills the fleet page's enrollment section.
type EnrollmentProps struct {
	// Admin shows the section: platform admins only.
	Admin bool
	CSRF  string
	Form  JoinTokenForm
	// NewToken, with its node, expiry and command line, is the join token
	// just made, shown this once.
	NewToken, NewTokenNode, NewTokenExpires, NewCommand string
	Nodes                                               []EnrolledNode
	Errors                                              FieldErrors
}

// JoinTokenForm is what the Add node form was sent with.
type JoinTokenForm struct {
	Node, Host, PortFirst, PortLast string
}

// EnrolledNode is one row of the enrolled nodes.
type EnrolledNode struct {
	Node, Enrolled, Rotated string
	Revoked                 bool
}
