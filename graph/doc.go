// Package graph owns inference graphs: the definition of a graph version
// (nodes that call endpoints, composed as sequence, switch, ensemble,
// splitter and router nodes), its validation at save, and its execution.
//
// It is pure: no I/O client, no database, no HTTP. The executor reaches
// steps through a Caller the gateway gives it (the gateway's own routing,
// so a step gets authentication, limits and statistics as a call of the
// graph's team); validation learns about targets through a Lookup that
// package endpoint fills from the database, whose "may this team call that
// endpoint" answer comes from one function there (endpoint.MayCall).
//
// Decisions worth knowing:
//   - Nodes are a flat list referenced by id, so a definition can name a
//     node twice (it runs twice) and can form a cycle, which Validate
//     refuses naming the node; a graph that calls a graph is followed
//     through the targets' own definitions, so a cycle across graph
//     endpoints is refused too.
//   - A value flows through nodes as JSON. A call node sends what it
//     received (or its input template filled from it) and returns the
//     answer; an answer with predictions and no instances becomes the next
//     call's instances, so a sequence of predict endpoints chains with no
//     mapping at all.
//   - A soft node that fails or times out is left out: a sequence passes
//     its input on, an ensemble combines the members that answered, and the
//     answer lists it under graph.skipped with graph.partial set. A hard
//     node's failure ends the graph with a *StepError naming it.
//   - Retries happen only for idempotent call nodes, only after a 502, 503,
//     504 or a connection that could not be made, at most MaxRetries times.
//   - Timeouts are per call node (the edge into it) and run on the injected
//     clock; the splitter's choice comes from the injected random source.
package graph
