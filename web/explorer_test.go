package web

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// TestExplorerFoldsTablesAndHidesAnEmptyTraceColumn: failures and the
// slowest requests are open, sampled ones folded under their count; with
// no trace id in the window the column is gone and a line says how to get
// one, and with one the column is there for every row.
func TestExplorerFoldsTablesAndHidesAnEmptyTraceColumn(t *testing.T) {
	row := func(id, trace string) RequestRow {
		return RequestRow{At: "07:00:00.000", RequestID: id, TraceID: trace, Version: "v1", Replica: "e-v1-r1", Status: "200",
			Latency: "1.00 ms", Upstream: "0.90 ms", Overhead: "0.10 ms"}
	}
	render := func(p ExplorerProps) *goquery.Document {
		var b bytes.Buffer
		if err := explorer(p).Render(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		doc, err := goquery.NewDocumentFromReader(&b)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}

	doc := render(ExplorerProps{Minutes: 60, Slowest: []RequestRow{row("a", ""), row("b", "")}, Sampled: []RequestRow{row("c", "")}})
	if doc.Find("#no-trace-ids").Length() != 1 || doc.Find("th:contains('Trace id')").Length() != 0 {
		t.Errorf("untraced window: note %d, trace columns %d; want the note and no column",
			doc.Find("#no-trace-ids").Length(), doc.Find("th:contains('Trace id')").Length())
	}
	for id, want := range map[string]bool{"failed": false, "slowest": true, "sampled": false} {
		if _, open := doc.Find("#explorer-" + id).Attr("open"); open != want {
			t.Errorf("#explorer-%s open = %v, want %v", id, open, want)
		}
	}
	if got := strings.Join(strings.Fields(doc.Find("#explorer-slowest summary").Text()), " "); got != "Slowest 2" {
		t.Errorf("slowest summary = %q, want the count", got)
	}
	if doc.Find("#no-failed").Length() != 1 || doc.Find("#no-requests").Length() != 0 {
		t.Error("no failures among other requests: want the failed table's empty-state line")
	}
	if doc := render(ExplorerProps{Minutes: 60}); doc.Find("#no-requests").Length() != 1 || doc.Find("details, #no-trace-ids").Length() != 0 {
		t.Error("no request at all: want one line, no folded tables and no tracing note")
	}

	doc = render(ExplorerProps{Minutes: 60, Failed: []RequestRow{row("f", "0af7651916cd43dd8448eb211c80319c")}, Sampled: []RequestRow{row("s", "")}})
	if doc.Find("#no-trace-ids").Length() != 0 || doc.Find("#requests-sampled th:contains('Trace id')").Length() != 1 ||
		doc.Find(`#requests-sampled tr[data-request="s"] td`).Length() != 9 {
		t.Error("traced window: want the trace id column in every table, an empty cell where a request has none, and no note")
	}
	if _, open := doc.Find("#explorer-failed").Attr("open"); !open {
		t.Error("failures in the window: want their table open")
	}
}
