package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

// errRolledBack is how a watched rollout that ended rolled back exits: 1,
// so that a script can tell it from one that completed.
type errRolledBack struct{ state, reason string }

func (e errRolledBack) Error() string { return "rollout ended " + e.state + ": " + e.reason }

// rolloutEvent is one event of a rollout as the API shows it.
type rolloutEvent struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	Kind      string          `json:"kind"`
	StepIndex int             `json:"step_index"`
	State     string          `json:"state"`
	Decision  string          `json:"decision,omitempty"`
	Message   string          `json:"message"`
	Actor     string          `json:"actor,omitempty"`
	Verdict   json.RawMessage `json:"verdict,omitempty"`
}

// watchedRollout is the part of a rollout watch reads.
type watchedRollout struct {
	ID       int64          `json:"id"`
	State    string         `json:"state"`
	Reason   string         `json:"reason"`
	Finished *time.Time     `json:"finished_at"`
	Events   []rolloutEvent `json:"events"`
}

func (a *app) watchCmd() *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch ROLLOUT [--interval 2s]",
		Short: "Follow a rollout: each event as it happens; exit 0 when it completes, 1 when it rolls back",
		Long: `watch prints a rollout's events (steps, verdicts with their numbers,
approvals, rollbacks) as they happen, reading the rollout every --interval,
and ends with the rollout: exit 0 when it completed, 1 when it rolled back.
With -o json each event is one JSON line.`,
		Args: args("ROLLOUT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			return a.watch(cmd.Context(), c, argv[0], interval)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often to read the rollout")
	return cmd
}

func (a *app) watch(ctx context.Context, c *client, id string, interval time.Duration) error {
	var last int64
	for {
		b, err := c.call(ctx, http.MethodGet, "/rollouts/"+esc(id), nil, nil)
		if err != nil {
			return err
		}
		var r watchedRollout
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		slices.SortFunc(r.Events, func(x, y rolloutEvent) int { return cmp.Compare(x.ID, y.ID) })
		for _, e := range r.Events {
			if e.ID <= last {
				continue
			}
			last = e.ID
			if a.output != "table" {
				line, _ := json.Marshal(e)
				fmt.Fprintln(a.env.Stdout, string(line))
				continue
			}
			fmt.Fprintf(a.env.Stdout, "%s  step %d  %-17s %-10s %s", e.At.UTC().Format("2006-01-02 15:04:05"), e.StepIndex, e.State, e.Kind, e.Message)
			if e.Actor != "" {
				fmt.Fprintf(a.env.Stdout, "  (%s)", e.Actor)
			}
			if len(e.Verdict) > 0 && string(e.Verdict) != "null" {
				fmt.Fprintf(a.env.Stdout, "  verdict %s", e.Verdict)
			}
			fmt.Fprintln(a.env.Stdout)
		}
		if r.Finished != nil {
			if a.output == "table" {
				fmt.Fprintf(a.env.Stdout, "rollout %d %s\n", r.ID, r.State)
			}
			if r.State == "rolled_back" {
				return errRolledBack{r.State, r.Reason}
			}
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
