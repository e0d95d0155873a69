package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// errRolledBack is how a watched rollout that ended rolled back exits: 1,
// so that a script can tell it from one that completed.
type errRolledBack struct{ state, reason string }

func (e errRolledBack) Error() string { return "rollout ended " + e.state + ": " + e.reason }

// rolloutEvent is one "rollout" event of the API's event stream.
type rolloutEvent struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	Kind      string          `json:"kind"`
	StepIndex int             `json:"step_index"`
	State     string          `json:"state"`
	Decision  string          `json:"decision,omitempty"`
	Message   string          `json:"message"`
	Actor     string          `json:"actor,omitempty"`
	Percent   int             `json:"percent"`
	Verdict   json.RawMessage `json:"verdict,omitempty"`
	Windows   json.RawMessage `json:"windows,omitempty"`
}

// rolloutEnd is the stream's "end" event.
type rolloutEnd struct {
	ID     int64  `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
}

// verdictChecks is the part of a verdict watch prints: each check with
// its numbers.
type verdictChecks struct {
	Checks []struct {
		Name      string   `json:"name"`
		Candidate float64  `json:"candidate"`
		Incumbent *float64 `json:"incumbent"`
		Threshold float64  `json:"threshold"`
		Outcome   string   `json:"outcome"`
	} `json:"checks"`
}

func (a *app) watchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ROLLOUT",
		Short: "Follow a rollout: each event as it happens; exit 0 when it completes, 1 when it rolls back",
		Long: `watch prints a rollout's events (steps with the candidate's traffic
percent, verdicts with each check's numbers, approvals, rollbacks) as they
happen, read from the API's event stream (GET /rollouts/{id}/events,
server-sent events), and ends with the rollout: exit 0 when it completed,
1 when it rolled back. A dropped stream is opened again from the last
event seen. With -o json each event is one JSON line.`,
		Args: args("ROLLOUT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			return a.watch(cmd.Context(), c, argv[0])
		},
	}
}

// errStreamEnded is a stream that closed before the rollout ended (the
// server bounds a stream's life): watch opens it again.
var errStreamEnded = errors.New("event stream closed")

func (a *app) watch(ctx context.Context, c *client, id string) error {
	var last int64
	for failures := 0; ; {
		end, err := a.follow(ctx, c, id, &last)
		if end != nil {
			if a.output == "table" {
				fmt.Fprintf(a.env.Stdout, "rollout %d %s\n", end.ID, end.State)
			}
			if end.State == "rolled_back" {
				return errRolledBack{end.State, end.Reason}
			}
			return nil
		}
		var p *Problem
		if errors.As(err, &p) || ctx.Err() != nil {
			return err // the API refused (not found, forbidden): no retry cures it
		}
		if !errors.Is(err, errStreamEnded) {
			if failures++; failures > uploadAttempts {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "modelplane: event stream lost (%v); reconnecting\n", err)
		}
		if err := backoff(ctx, min(failures, 3)); err != nil {
			return err
		}
		if c.renew != nil {
			// A login token may expire during a long watch.
			if err := c.renew(ctx); err != nil {
				return err
			}
		}
	}
}

// follow reads one event stream, printing each rollout event after
// *last and moving *last on; it returns the end event when the rollout
// ended, else why the stream stopped.
func (a *app) follow(ctx context.Context, c *client, id string, last *int64) (*rolloutEnd, error) {
	req, err := c.request(ctx, http.MethodGet, "/rollouts/"+esc(id)+"/events", nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var event string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "data":
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(value)
			}
			continue
		}
		// A blank line dispatches the event.
		switch event {
		case "rollout":
			var e rolloutEvent
			if err := json.Unmarshal([]byte(data.String()), &e); err != nil {
				return nil, fmt.Errorf("event stream: %w", err)
			}
			if e.ID > *last {
				*last = e.ID
				a.printEvent(e, data.String())
			}
		case "end":
			var end rolloutEnd
			if err := json.Unmarshal([]byte(data.String()), &end); err != nil {
				return nil, fmt.Errorf("event stream: %w", err)
			}
			return &end, nil
		}
		event = ""
		data.Reset()
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return nil, errStreamEnded
}

// printEvent prints one event: a JSON line as the API sent it, or a line
// for people with the step, the candidate's percent and, for a verdict,
// each check with its numbers.
func (a *app) printEvent(e rolloutEvent, raw string) {
	if a.output != "table" {
		fmt.Fprintln(a.env.Stdout, raw)
		return
	}
	w := a.env.Stdout
	fmt.Fprintf(w, "%s  step %d  %3d%%  %-17s %-8s %s", e.At.UTC().Format("2006-01-02 15:04:05"), e.StepIndex, e.Percent, e.State, e.Kind, e.Message)
	if e.Actor != "" {
		fmt.Fprintf(w, "  (%s)", e.Actor)
	}
	fmt.Fprintln(w)
	var v verdictChecks
	if len(e.Verdict) == 0 || json.Unmarshal(e.Verdict, &v) != nil {
		return
	}
	for _, ch := range v.Checks {
		fmt.Fprintf(w, "    %-26s %-7s candidate %s", ch.Name, ch.Outcome, num(ch.Candidate))
		if ch.Incumbent != nil {
			fmt.Fprintf(w, "  incumbent %s", num(*ch.Incumbent))
		}
		fmt.Fprintf(w, "  threshold %s\n", num(ch.Threshold))
	}
}

// num prints a check's number to four decimals at most, without trailing
// zeros (a p99 of 71.92000000000002 ms is 71.92).
func num(f float64) string { return strconv.FormatFloat(math.Round(f*1e4)/1e4, 'f', -1, 64) }
