package web

// GraphProps fills a graph endpoint's page: one diagram per version, the
// routed ones first.
type GraphProps struct {
	Versions []GraphVersionView
	// CanWrite shows the form that saves a new version, holding
	// NewVersion and NewDefinition (the routed version's, to start from)
	// and Errors from the last try.
	CanWrite      bool
	CSRF          string
	Endpoint      string
	NewVersion    string
	NewDefinition string
	Errors        FieldErrors
	// Cost is what the graph cost this month, by step; nil when it
	// could not be read (no usage store, ClickHouse down).
	Cost *GraphCostView
}

// GraphCostView is a graph's cost over a period broken down by the step
// endpoints it called: each its share of that endpoint's cost
// (docs/graphs.md), in dollars and cents; in micro-dollars (the CSV) the
// rows add up to the total.
type GraphCostView struct {
	Period string
	Steps  []GraphStepCost
	Total  string
	// CSV downloads the same breakdown from the chargeback page.
	CSV string
}

// GraphStepCost is one step endpoint's share charged to the graph.
type GraphStepCost struct {
	Endpoint string
	Requests string
	Cost     string
}

// GraphVersionView is one graph version and its diagram, drawn from the
// entry node down.
type GraphVersionView struct {
	Name string
	// Weight is the version's share of traffic, -1 when not routed.
	Weight int32
	Root   GraphNodeView
}

// GraphNodeView is one node of a diagram as nested boxes: Kind is the
// node's type, Target the endpoint it calls ("" for none), Detail a
// one-line summary of its settings (timeout, soft, combine, condition),
// and Children the nodes it leads to, each with the Edge label that leads
// there (a case, a weight, a route name). Repeat is set for a node drawn
// again where a parent refers to it a second time.
type GraphNodeView struct {
	ID       string
	Kind     string
	Target   string
	Detail   string
	Edge     string
	Repeat   bool
	Children []GraphNodeView
}

// GraphNewProps fills the form that publishes a graph endpoint: its name,
// team and definition as JSON (docs/graphs.md).
type GraphNewProps struct {
	Layout
	Name, Team, Definition string
	Teams                  []string
	Errors                 FieldErrors
}
