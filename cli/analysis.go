package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) experimentsCmd() *cobra.Command {
	set := &cobra.Command{
		Use:     "set ENDPOINT NAME VERSION=SHARE...",
		Short:   "Start or replace an endpoint's A/B experiment: callers sending X-User-Id keep one arm",
		Example: "  modelplane experiments set fraud-scoring threshold-test v23=50 v24=50",
		Args: func(_ *cobra.Command, argv []string) error {
			if len(argv) < 3 {
				return usagef("want ENDPOINT, NAME and at least one VERSION=SHARE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			var arms []map[string]any
			for _, w := range argv[2:] {
				name, val, ok := strings.Cut(w, "=")
				n, err := strconv.Atoi(val)
				if !ok || name == "" || err != nil {
					return usagef("%q: want VERSION=SHARE, as v23=50", w)
				}
				arms = append(arms, map[string]any{"version": name, "share": n})
			}
			return a.send(cmd, http.MethodPut, "/endpoints/"+esc(argv[0])+"/experiment", map[string]any{"name": argv[1], "arms": arms},
				append(endpointFields[:len(endpointFields):len(endpointFields)], column{"EXPERIMENT", "experiment.name"}, column{"ARMS", "experiment.arms"}))
		},
	}
	clearCmd := &cobra.Command{
		Use:   "clear ENDPOINT",
		Short: "End an endpoint's A/B experiment",
		Args:  args("ENDPOINT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			if _, err := c.call(cmd.Context(), http.MethodDelete, "/endpoints/"+esc(argv[0])+"/experiment", nil, nil); err != nil {
				return err
			}
			if a.output == "table" {
				fmt.Fprintf(a.env.Stdout, "experiment of %s ended\n", argv[0])
				return nil
			}
			return a.printData(map[string]any{"ended": argv[0]})
		},
	}
	return group("experiments", "An endpoint's A/B experiment: set, clear", set, clearCmd)
}

func (a *app) driftCmd() *cobra.Command {
	var version, reference, current string
	cmd := &cobra.Command{
		Use:     "drift ENDPOINT [--version V] [--reference 7d|FROM/TO] [--current 1h|FROM/TO]",
		Short:   "Drift of an endpoint's inputs (PSI per feature) and outputs against a reference window",
		Example: "  modelplane drift fraud-scoring --version v23 --current 2h",
		Args:    args("ENDPOINT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			q := url.Values{}
			for k, v := range map[string]string{"version": version, "reference": reference, "current": current} {
				if v != "" {
					q.Set(k, v)
				}
			}
			b, err := c.call(cmd.Context(), http.MethodGet, "/endpoints/"+esc(argv[0])+"/drift", q, nil)
			if err != nil {
				return err
			}
			if a.output != "table" {
				return a.printOne(b, nil)
			}
			if err := a.printOne(b, []column{{"ENDPOINT", "endpoint"}, {"VERDICT", "verdict"}, {"VERSION", "current.version"},
				{"CURRENT", "current.from"}, {"REFERENCE", "reference.from"}, {"CURRENT SAMPLES", "current_samples"},
				{"REFERENCE SAMPLES", "reference_samples"}, {"OUTPUT METRIC", "output.metric"}, {"OUTPUT VALUE", "output.value"},
				{"OUTPUT DRIFTING", "output.drifting"}}); err != nil {
				return err
			}
			var r struct {
				Features []json.RawMessage `json:"features"`
			}
			if err := json.Unmarshal(b, &r); err != nil || len(r.Features) == 0 {
				return err
			}
			fmt.Fprintln(a.env.Stdout)
			return a.printItems(r.Features, []column{{"FEATURE", "name"}, {"PSI", "psi"}, {"THRESHOLD", "threshold"}, {"FLAGGED", "flagged"}})
		},
	}
	f := cmd.Flags()
	f.StringVar(&version, "version", "", "version judged (default the stable one)")
	f.StringVar(&reference, "reference", "", "reference window: a length before the current one (7d) or FROM/TO, optionally VERSION@")
	f.StringVar(&current, "current", "", "current window: a length ending now (1h) or FROM/TO")
	return cmd
}
