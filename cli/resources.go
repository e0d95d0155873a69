package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Columns of each noun's table.
var (
	modelCols    = []column{{"NAME", "name"}, {"TEAM", "team"}, {"TASK", "task"}, {"VERSIONS", "version_count"}, {"CREATED", "created_at"}}
	endpointCols = []column{{"NAME", "name"}, {"TEAM", "team"}, {"MODEL", "model"}, {"STATUS", "status"}, {"TRAFFIC", "traffic"},
		{"MIN", "min_replicas"}, {"MAX", "max_replicas"}, {"TIER", "tier"}, {"PROFILE", "instance_profile"}}
	endpointFields = append(endpointCols[:len(endpointCols):len(endpointCols)], column{"PLACEMENT ERROR", "placement_error"}, column{"UPDATED", "updated_at"})
	rolloutCols    = []column{{"ID", "id"}, {"ENDPOINT", "endpoint"}, {"FROM", "from_version"}, {"TO", "to_version"}, {"STRATEGY", "strategy"},
		{"STATE", "state"}, {"STEP", "step_index"}, {"PAUSED", "paused"}, {"STARTED BY", "started_by"}, {"REASON", "reason"}}
	keyCols   = []column{{"ID", "id"}, {"NAME", "name"}, {"PREFIX", "prefix"}, {"TEAM", "team"}, {"ROLE", "role"}, {"EXPIRES", "expires_at"}, {"LAST USED", "last_used_at"}, {"REVOKED", "revoked_at"}}
	nodeCols  = []column{{"NAME", "name"}, {"STATE", "state"}, {"GPUS", "gpu_count"}, {"GPU TYPES", "gpu_types"}, {"CPU", "cpu_cores"}, {"CPU USED", "cpu_cores_used"}, {"MEMORY MB", "memory_mb"}, {"HEARTBEAT AGE S", "heartbeat_age_seconds"}}
	auditCols = []column{{"ID", "id"}, {"AT", "at"}, {"ACTOR", "who"}, {"VIA", "via"}, {"ACTION", "action"}, {"OBJECT", "object_type"}, {"NAME", "object_name"}, {"TEAM", "team"}}
)

// getCmd is a verb that GETs one object at path(args) and prints it.
func (a *app) getCmd(use, short string, names []string, path func([]string) string, cols []column) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args(names...),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			b, err := c.call(cmd.Context(), http.MethodGet, path(argv), nil, nil)
			if err != nil {
				return err
			}
			return a.printOne(b, cols)
		},
	}
}

// listCmd is a verb that lists every item at path(args).
func (a *app) listCmd(use, short string, names []string, path func([]string) string, cols []column) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args(names...),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			items, err := c.list(cmd.Context(), path(argv), nil, limit)
			if err != nil {
				return err
			}
			return a.printItems(items, cols)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (0: all)")
	return cmd
}

// send is a verb's request whose answer, one object, is printed.
func (a *app) send(cmd *cobra.Command, method, path string, body any, cols []column) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	b, err := c.call(cmd.Context(), method, path, nil, body)
	if err != nil {
		return err
	}
	return a.printOne(b, cols)
}

func esc(s string) string { return url.PathEscape(s) }

func (a *app) modelsCmd() *cobra.Command {
	var team, task, description, features, schema string
	create := &cobra.Command{
		Use:   "create NAME --task classification|regression|llm",
		Short: "Register a model",
		Args:  args("NAME"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			body := map[string]any{"name": argv[0], "task": task}
			if team != "" {
				body["team"] = team
			}
			if description != "" {
				body["description"] = description
			}
			if features != "" {
				body["feature_names"] = strings.Split(features, ",")
			}
			if schema != "" {
				b, err := readArg(schema, a.env.Stdin)
				if err != nil {
					return err
				}
				body["input_schema"] = json.RawMessage(b)
			}
			return a.send(cmd, http.MethodPost, "/models", body, modelCols)
		},
	}
	f := create.Flags()
	f.StringVar(&task, "task", "", "classification, regression or llm")
	f.StringVar(&team, "team", "", "owning team (may be left out by a member of one team)")
	f.StringVar(&description, "description", "", "what the model does")
	f.StringVar(&features, "feature-names", "", "the model's features in order, comma separated")
	f.StringVar(&schema, "input-schema", "", "JSON Schema of one instance: JSON or @file")
	_ = create.MarkFlagRequired("task")
	_ = create.RegisterFlagCompletionFunc("task", cobra.FixedCompletions([]string{"classification", "regression", "llm"}, cobra.ShellCompDirectiveNoFileComp))
	return group("models", "Models: list, get, create",
		a.listCmd("list", "List the models you may see", nil, func([]string) string { return "/models" }, modelCols),
		a.getCmd("get MODEL", "Show a model", []string{"MODEL"}, func(v []string) string { return "/models/" + esc(v[0]) }, modelCols),
		create)
}

// endpointSettings are the flags of endpoints create and update.
type endpointSettings struct {
	min, max                    int32
	tier, profile               string
	sampling, rps               float64
	timeoutMS, retention, burst int32
}

func (s *endpointSettings) flags(f interface {
	Int32Var(*int32, string, int32, string)
	StringVar(*string, string, string, string)
	Float64Var(*float64, string, float64, string)
}) {
	f.Int32Var(&s.min, "min-replicas", 0, "replicas kept however idle (0 scales to zero; default 1 on create)")
	f.Int32Var(&s.max, "max-replicas", 0, "most replicas (default min-replicas, at least 1)")
	f.StringVar(&s.tier, "tier", "", "critical, standard (default) or batch")
	f.StringVar(&s.profile, "instance-profile", "", "cpu or a GPU profile (default: from the version)")
	f.Float64Var(&s.sampling, "sampling-rate", 0, "share of predictions sampled for drift, 0 to 1")
	f.Float64Var(&s.rps, "rate-limit-rps", 0, "requests per second across callers at each gateway")
	f.Int32Var(&s.burst, "rate-limit-burst", 0, "burst of the rate limit")
	f.Int32Var(&s.timeoutMS, "timeout-ms", 0, "bound on one request upstream")
	f.Int32Var(&s.retention, "retention-days", 0, "days of sampled predictions kept")
}

// apply writes the flags the user set into body (JSON field names).
func (s *endpointSettings) apply(cmd *cobra.Command, body map[string]any) {
	set := map[string]any{"min-replicas": s.min, "max-replicas": s.max, "tier": s.tier, "instance-profile": s.profile,
		"sampling-rate": s.sampling, "rate-limit-rps": s.rps, "rate-limit-burst": s.burst, "timeout-ms": s.timeoutMS, "retention-days": s.retention}
	for flag, v := range set {
		if cmd.Flags().Changed(flag) {
			body[strings.ReplaceAll(flag, "-", "_")] = v
		}
	}
}

func (a *app) endpointsCmd() *cobra.Command {
	var model, version string
	var cs, us endpointSettings
	create := &cobra.Command{
		Use:   "create NAME --model MODEL --version VERSION",
		Short: "Create an endpoint serving one version",
		Args:  args("NAME"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			body := map[string]any{"name": argv[0], "model": model, "version": version}
			cs.apply(cmd, body)
			return a.send(cmd, http.MethodPost, "/endpoints", body, endpointFields)
		},
	}
	create.Flags().StringVar(&model, "model", "", "the model")
	create.Flags().StringVar(&version, "version", "", "the version served at 100 percent")
	_ = create.MarkFlagRequired("model")
	_ = create.MarkFlagRequired("version")
	cs.flags(create.Flags())
	update := &cobra.Command{
		Use:   "update ENDPOINT [--min-replicas N] [--max-replicas N] [--tier T] ...",
		Short: "Change an endpoint's settings; those not given keep their value",
		Args:  args("ENDPOINT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			path := "/endpoints/" + esc(argv[0])
			cur, err := c.call(cmd.Context(), http.MethodGet, path, nil, nil)
			if err != nil {
				return err
			}
			var e map[string]any
			if err := decode(cur, &e); err != nil {
				return err
			}
			body := map[string]any{}
			for _, k := range []string{"instance_profile", "min_replicas", "max_replicas", "tier", "sampling_rate", "retention_days",
				"rate_limit_rps", "rate_limit_burst", "timeout_ms", "batching"} {
				if v, ok := e[k]; ok && v != nil {
					body[k] = v
				}
			}
			us.apply(cmd, body)
			return a.send(cmd, http.MethodPut, path, body, endpointFields)
		},
	}
	us.flags(update.Flags())
	del := &cobra.Command{
		Use:   "delete ENDPOINT",
		Short: "Delete an endpoint and its replicas",
		Args:  args("ENDPOINT"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			if _, err := c.call(cmd.Context(), http.MethodDelete, "/endpoints/"+esc(argv[0]), nil, nil); err != nil {
				return err
			}
			if a.output == "table" {
				fmt.Fprintf(a.env.Stdout, "endpoint %s deleted\n", argv[0])
				return nil
			}
			return a.printData(map[string]any{"deleted": argv[0]})
		},
	}
	return group("endpoints", "Endpoints: list, get, create, update, delete",
		a.listCmd("list", "List the endpoints you may see", nil, func([]string) string { return "/endpoints" }, endpointCols),
		a.getCmd("get ENDPOINT", "Show an endpoint: status, traffic, replicas' placement", []string{"ENDPOINT"},
			func(v []string) string { return "/endpoints/" + esc(v[0]) }, endpointFields),
		create, update, del)
}

func (a *app) trafficCmd() *cobra.Command {
	set := &cobra.Command{
		Use:     "set ENDPOINT VERSION=WEIGHT...",
		Short:   "Split an endpoint's traffic: v23=95 v24=5 (weights sum to 100; v25=0:10 mirrors 10 percent to v25)",
		Example: "  modelplane traffic set fraud-scoring v23=95 v24=5",
		Args: func(_ *cobra.Command, argv []string) error {
			if len(argv) < 2 {
				return usagef("want ENDPOINT and at least one VERSION=WEIGHT")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			var weights []map[string]any
			for _, w := range argv[1:] {
				name, val, ok := strings.Cut(w, "=")
				weight, shadow, hasShadow := strings.Cut(val, ":")
				n, err := strconv.Atoi(weight)
				if !ok || name == "" || err != nil {
					return usagef("%q: want VERSION=WEIGHT, as v23=95", w)
				}
				entry := map[string]any{"version": name, "weight": n}
				if hasShadow {
					s, err := strconv.Atoi(shadow)
					if err != nil {
						return usagef("%q: want VERSION=0:SHADOW_PERCENT, as v25=0:10", w)
					}
					entry["shadow_percent"] = s
				}
				weights = append(weights, entry)
			}
			return a.send(cmd, http.MethodPut, "/endpoints/"+esc(argv[0])+"/traffic", map[string]any{"weights": weights}, endpointFields)
		},
	}
	return group("traffic", "An endpoint's traffic split: set", set)
}

func (a *app) rolloutsCmd() *cobra.Command {
	var strategy, steps string
	var bake time.Duration
	var maxRegression float64
	var acceptWorse bool
	start := &cobra.Command{
		Use:     "start ENDPOINT VERSION",
		Short:   "Start a rollout of VERSION on ENDPOINT",
		Example: "  modelplane rollouts start fraud-scoring v24 --steps 25,100 --bake 10m --accept-worse-metrics",
		Args:    args("ENDPOINT", "VERSION"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			body := map[string]any{"version": argv[1]}
			if strategy != "" {
				body["strategy"] = strategy
			}
			if steps != "" {
				var ss []map[string]any
				for _, p := range strings.Split(steps, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(p))
					if err != nil {
						return usagef("--steps %q: want percents, as 5,25,100", steps)
					}
					ss = append(ss, map[string]any{"percent": n, "bake_seconds": bake.Seconds()})
				}
				body["steps"] = ss
			}
			if cmd.Flags().Changed("max-regression") {
				body["criteria"] = map[string]any{"max_regression": maxRegression}
			}
			if acceptWorse {
				body["accept_worse_metrics"] = true
			}
			return a.send(cmd, http.MethodPost, "/endpoints/"+esc(argv[0])+"/rollouts", body, rolloutCols)
		},
	}
	start.Flags().StringVar(&strategy, "strategy", "", "canary (default), blue-green or shadow")
	start.Flags().StringVar(&steps, "steps", "", "traffic percents of the steps, as 5,25,100 (default 1,5,25,50,100)")
	start.Flags().DurationVar(&bake, "bake", 10*time.Minute, "how long each step of --steps bakes")
	start.Flags().Float64Var(&maxRegression, "max-regression", 0, "latency regression allowed, as a fraction (1 is 100 percent)")
	start.Flags().BoolVar(&acceptWorse, "accept-worse-metrics", false, "start even though the candidate's offline metrics are worse than the serving version's (refused otherwise, naming them)")
	_ = start.RegisterFlagCompletionFunc("strategy", cobra.FixedCompletions([]string{"canary", "blue-green", "shadow"}, cobra.ShellCompDirectiveNoFileComp))
	verbs := []*cobra.Command{start,
		a.listCmd("list ENDPOINT", "List an endpoint's rollouts, newest first", []string{"ENDPOINT"},
			func(v []string) string { return "/endpoints/" + esc(v[0]) + "/rollouts" }, rolloutCols),
		a.getCmd("get ROLLOUT", "Show a rollout", []string{"ROLLOUT"}, func(v []string) string { return "/rollouts/" + esc(v[0]) }, rolloutCols),
		a.watchCmd(),
	}
	for _, act := range []struct{ name, short string }{
		{"approve", "Approve the step to 100 percent (a team admin who did not start it)"},
		{"reject", "Reject the step to 100 percent, which rolls back"},
		{"rollback", "Roll back now: all traffic to the incumbent"},
		{"pause", "Pause the judge and the steps"},
		{"resume", "Resume; the current step bakes again"},
	} {
		var comment string
		c := &cobra.Command{
			Use:   act.name + " ROLLOUT",
			Short: act.short,
			Args:  args("ROLLOUT"),
			RunE: func(cmd *cobra.Command, argv []string) error {
				var body any
				if comment == "" && act.name != "pause" && act.name != "resume" {
					comment = a.ask("comment for the audit log (enter for none): ")
				}
				if comment != "" {
					body = map[string]any{"comment": comment}
				}
				return a.send(cmd, http.MethodPost, "/rollouts/"+esc(argv[0])+"/"+act.name, body, rolloutCols)
			},
		}
		if act.name == "approve" || act.name == "reject" || act.name == "rollback" {
			c.Flags().StringVarP(&comment, "comment", "m", "", "why, for the audit log")
		}
		verbs = append(verbs, c)
	}
	return group("rollouts", "Rollouts: start, list, get, watch, approve, reject, rollback, pause, resume", verbs...)
}

func (a *app) keysCmd() *cobra.Command {
	var team, role string
	var expires time.Duration
	create := &cobra.Command{
		Use:   "create NAME --role ROLE [--team TEAM]",
		Short: "Create an API key; the key is shown this once",
		Args:  args("NAME"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			body := map[string]any{"name": argv[0], "role": role}
			if team != "" {
				body["team"] = team
			}
			if expires > 0 {
				body["expires_at"] = a.now().Add(expires).UTC().Format(time.RFC3339)
			}
			return a.send(cmd, http.MethodPost, "/api-keys", body, append([]column{{"KEY", "key"}}, keyCols...))
		},
	}
	create.Flags().StringVar(&team, "team", "", "owning team; none for org-wide platform_admin and finance keys")
	create.Flags().StringVar(&role, "role", "", "admin, engineer, viewer, platform_admin or finance")
	create.Flags().DurationVar(&expires, "expires-in", 0, "the key stops working after this long (0: never)")
	_ = create.MarkFlagRequired("role")
	_ = create.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"admin", "engineer", "viewer", "platform_admin", "finance"}, cobra.ShellCompDirectiveNoFileComp))
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key",
		Args:  args("ID"),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.send(cmd, http.MethodDelete, "/api-keys/"+esc(argv[0]), nil, keyCols)
		},
	}
	return group("keys", "API keys: list, create, revoke",
		a.listCmd("list", "List the API keys you may see", nil, func([]string) string { return "/api-keys" }, keyCols), create, revoke)
}

func (a *app) nodesCmd() *cobra.Command {
	return group("nodes", "The fleet (platform admins): list, get",
		a.listCmd("list", "List the nodes", nil, func([]string) string { return "/nodes" }, nodeCols),
		a.getCmd("get NODE", "Show a node", []string{"NODE"}, func(v []string) string { return "/nodes/" + esc(v[0]) }, nodeCols))
}

func (a *app) auditCmd() *cobra.Command {
	var action, objectType, actor string
	var limit int
	cmd := &cobra.Command{
		Use:   "audit [--action A] [--object-type T] [--actor NAME]",
		Short: "The audit log, newest first",
		Args:  args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			q := url.Values{}
			for k, v := range map[string]string{"action": action, "object_type": objectType, "actor": actor} {
				if v != "" {
					q.Set(k, v)
				}
			}
			items, err := c.list(cmd.Context(), "/audit", q, limit)
			if err != nil {
				return err
			}
			return a.printItems(items, auditCols)
		},
	}
	cmd.Flags().StringVar(&action, "action", "", "only this action, as endpoint.update")
	cmd.Flags().StringVar(&objectType, "object-type", "", "only this kind of object, as endpoint")
	cmd.Flags().StringVar(&actor, "actor", "", "only this actor")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many (0: all)")
	return cmd
}

func (a *app) chargebackCmd() *cobra.Command {
	var from, to, groupBy, team, endpoint, graph string
	var csv bool
	cmd := &cobra.Command{
		Use:   "chargeback [--from DATE] [--to DATE] [--group-by team,endpoint] [--csv]",
		Short: "GPU-hours and cost per group over a period (this month by default)",
		Example: "  modelplane chargeback --group-by team,endpoint\n" +
			"  modelplane chargeback --from 2026-11-01 --to 2026-12-01 --group-by team --csv",
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			// This calendar month in UTC, as the reports' days are.
			now := a.now().UTC()
			month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
			if from == "" {
				from = month.Format(time.DateOnly)
			}
			if to == "" {
				to = month.AddDate(0, 1, 0).Format(time.DateOnly)
			}
			q := url.Values{"from": {from}, "to": {to}}
			for k, v := range map[string]string{"group_by": groupBy, "team": team, "endpoint": endpoint, "graph": graph} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if csv {
				q.Set("format", "csv")
				req, err := c.request(cmd.Context(), http.MethodGet, "/chargeback", q, nil)
				if err != nil {
					return err
				}
				resp, err := c.send(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, err = io.Copy(a.env.Stdout, resp.Body)
				return err
			}
			b, err := c.call(cmd.Context(), http.MethodGet, "/chargeback", q, nil)
			if err != nil {
				return err
			}
			if a.output != "table" {
				return a.printOne(b, nil)
			}
			var r struct {
				GroupBy []string          `json:"group_by"`
				Rows    []json.RawMessage `json:"rows"`
				Total   json.RawMessage   `json:"total"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				return err
			}
			var cols []column
			for _, g := range r.GroupBy {
				cols = append(cols, column{strings.ToUpper(strings.ReplaceAll(g, "_", " ")), g})
			}
			cols = append(cols, column{"GPU HOURS", "gpu_hours"}, column{"CPU CORE HOURS", "cpu_core_hours"}, column{"COST USD", "cost_usd"}, column{"REQUESTS", "requests"},
				column{"USD/1K REQ", "cost_per_1k_requests_usd"}, column{"UTIL %", "avg_gpu_util_pct"})
			rows := r.Rows
			if len(r.Total) > 0 {
				var total map[string]any
				if err := decode(r.Total, &total); err == nil && len(r.GroupBy) > 0 {
					total[r.GroupBy[0]] = "TOTAL"
				}
				tb, _ := json.Marshal(total)
				rows = append(rows, tb)
			}
			return a.printItems(rows, cols)
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "start of the period, included: a date or RFC 3339 (default the first of this month, UTC)")
	f.StringVar(&to, "to", "", "end of the period, excluded (default the first of next month)")
	f.StringVar(&groupBy, "group-by", "team", "comma-separated: team, endpoint, model, version, gpu_type, allocation, caller_team (the teams that called each endpoint through a grant, charged their share of its cost), graph (the inference graphs whose steps called it)")
	f.StringVar(&team, "team", "", "only this team")
	f.StringVar(&endpoint, "endpoint", "", "only this endpoint")
	f.StringVar(&graph, "graph", "", "only the shares charged to this graph endpoint (its cost by step with --group-by endpoint,graph)")
	f.BoolVar(&csv, "csv", false, "print the API's CSV")
	return cmd
}

func (a *app) meCmd() *cobra.Command {
	return a.getCmd("me", "Who the key is: name, owner, teams and roles", nil, func([]string) string { return "/me" },
		[]column{{"NAME", "name"}, {"VIA", "via"}, {"OWNER", "owner"}, {"PLATFORM ROLE", "platform_role"}, {"TEAMS", "teams"}})
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "This client's version and the server's",
		Args:  args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.env.Stdout, "client  %s\n", a.env.Version)
			c, err := a.apiClient()
			if err != nil {
				return nil // no server configured: the client's is all there is
			}
			req, err := c.request(cmd.Context(), http.MethodGet, "/openapi.json", nil, nil)
			if err != nil {
				return err
			}
			resp, err := c.http.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			fmt.Fprintf(a.env.Stdout, "server  %s (%s)\n", orDash(resp.Header.Get("Modelplane-Version")), c.t.api)
			return nil
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// readArg reads a value given inline, as @file, or as @- (stdin).
func readArg(v string, stdin io.Reader) ([]byte, error) {
	switch {
	case v == "@-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(v, "@"):
		return os.ReadFile(v[1:])
	}
	return []byte(v), nil
}

// ask prompts on stderr and reads one line when stdin is a terminal; a
// script's stdin is never read.
func (a *app) ask(prompt string) string {
	f, ok := a.env.Stdin.(*os.File)
	if !ok {
		return ""
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return ""
	}
	fmt.Fprint(a.env.Stderr, prompt)
	line, _ := bufio.NewReader(f).ReadString('\n')
	return strings.TrimSpace(line)
}
