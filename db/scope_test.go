package db

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// teamOwned are the tables whose rows belong to a team. A query that reads or
// changes one of them must say which teams the caller may touch, in the SQL.
var teamOwned = map[string]bool{
	"teams":                     true,
	"team_members":              true,
	"api_keys":                  true,
	"models":                    true,
	"model_versions":            true,
	"model_version_validations": true,
	"endpoints":                 true,
	"routing_rules":             true,
	"audit_log":                 true,
	"replicas":                  true,
	"experiments":               true,
	"experiment_arms":           true,
	"budgets":                   true,
	"budget_alerts":             true,
	"rollouts":                  true,
	"rollout_events":            true,
	"approvals":                 true,
	"drift_scores":              true,
	"drift_alerts":              true,
	"team_quotas":               true,
	"webhooks":                  true,
	"deliveries":                true,
	"upload_sessions":           true,
	"upload_chunks":             true,
	"endpoint_grants":           true,
}

// teamPredicate is the one form every team-scoped query takes its scope in:
// (@all_teams::boolean OR x.team_id = ANY(@team_ids::bigint[])).
const teamPredicate = "team_ids::bigint[]"

// unscoped lists the queries on team-owned tables that carry no team
// predicate, each with why that is safe. Adding a query here is a decision a
// reviewer must see; the reason says who checked the team instead.
var unscoped = map[string]string{
	// Writes that take a team id (or a row id) the domain method has already
	// resolved through a team-scoped query, in the same transaction.
	"APIKeyCreate":            "insert; tenant.CreateKey resolved the team with TeamGetScoped and checked CanAdmin (or PlatformAdmin for org-wide keys)",
	"AuditInsert":             "insert; audit.Record runs inside the domain change's transaction with that change's already-scoped team id",
	"ModelCreate":             "insert; registry.CreateModel takes the team from the principal's memberships and checked CanWrite",
	"ModelVersionCreate":      "insert; registry.RegisterVersion takes model and team ids from the scoped ModelGet and checked CanWrite",
	"ModelVersionCreateGraph": "insert; endpoint.CreateGraph takes model and team ids from its own ModelCreate (team resolved from the principal, CanWrite checked), AddGraphVersion from the scoped getForWrite",
	"EndpointGraphsCalling":   "endpoint.GraphsUsing: for the owners revoking a team's access to their endpoint (grant.Service.Revoke, which scoped the endpoint to them), the names of that team's graphs calling it; names only",
	"EndpointGetAsTarget":     "graph validation's view of a target another team may own; endpoint.MayCall decides whether the graph's team may call it, and a refusal reads exactly like a missing endpoint, so nothing of the row leaves unless it may",
	"EndpointCreate":          "insert; endpoint.Create takes model and team ids from the scoped ModelGet/ModelVersionGet and checked CanWrite",
	"ExperimentUpsert":        "insert; endpoint.SetExperiment takes the endpoint id from the scoped getForWrite (CanWrite checked) in the same transaction",
	"ExperimentArmInsert":     "insert; endpoint.SetExperiment takes the endpoint id from the scoped getForWrite and version ids from the scoped ModelVersionGet",
	"RolloutCreate":           "insert; rollout.Service.Start takes team, endpoint and version ids from the scoped EndpointGet/ModelVersionGet and checked CanWrite",
	"RolloutEventInsert":      "insert; the rollout service and controller take team and rollout ids from the rollout row they loaded (RolloutGetForUpdate) in the same transaction",
	"ApprovalInsert":          "insert; rollout.Service.Approve/Reject take the ids from the scoped RolloutGetForUpdate and checked CanAdmin",
	"RoutingRuleUpsert":       "insert or update; the rollout service and controller take endpoint and version ids from the rollout row they loaded in the same transaction",
	"RoutingRuleInsert":       "insert; endpoint ids come from the scoped EndpointGet/EndpointCreate and version ids from the scoped ModelVersionGet in the same transaction",
	"TeamCreate":              "insert; platform admins only (tenant.CreateTeam)",
	"TeamMemberUpsert":        "tenant.SetMember resolved the team with TeamGetScoped and checked CanAdmin; also used by dev/demo seeding",
	"TeamMemberDelete":        "tenant.RemoveMember resolved the team with TeamGetScoped and checked CanAdmin",
	"TeamMemberListByEmail":   "tenant.RemoveMember resolved the team with TeamGetScoped and checked CanAdmin",
	"TeamMemberListByTeam":    "tenant.Members resolved the team with TeamGetScoped first",
	"TeamAdminCount":          "tenant.keepAdmin, inside SetMember/RemoveMember after the scoped team lookup and CanAdmin check",

	// Upload sessions (package registry): created for a model the caller's
	// scoped ModelGet returned, then reached only through the scoped
	// UploadSessionGetScoped/LockScoped.
	"UploadSessionCreate":   "insert; registry.CreateUpload takes model and team ids from the scoped Model lookup and checked CanWrite",
	"UploadSessionComplete": "registry.CompleteUpload: by the id of the session it locked with UploadSessionLockScoped in the same transaction",
	"UploadChunkAdd":        "insert; registry.PutChunk takes session and team ids from the scoped UploadSessionGetScoped and checked CanWrite",
	"UploadSessionsExpired": "registry upload sweeper: removes every team's expired sessions; no caller",
	"UploadSessionDelete":   "registry upload sweeper: deletes a session UploadSessionsExpired listed; no caller",

	// Notifications (package notify): the team comes from the change the
	// event tells of, or the sender acts for the platform.
	"WebhookCreate":              "insert; notify.Webhooks.Create resolved the team with TeamGetScoped and checked CanAdmin",
	"WebhookSetSecret":           "notify.Webhooks.RotateSecret loaded the webhook with WebhookGetScoped and checked CanAdmin; ResealAll is the server's key rotation",
	"WebhookSecret":              "notify.Sender: the delivery's own webhook, claimed by the platform's sender; no caller",
	"WebhookListSealedWithOther": "notify.ResealAll: the server's key rotation over every webhook; no caller",
	"DeliveryEnqueueWebhooks":    "insert; outbox.Event runs in the change's transaction with that change's team",
	"DeliveryEnqueueAlert":       "insert; outbox.Event runs in the change's transaction with that change's team",
	"DeliveryClaimDue":           "notify.Sender: the platform's sender claims every team's due deliveries; no caller",
	"DeliveryRecord":             "notify.Sender: records the outcome of a delivery it claimed; no caller",
	// The control plane's /metrics (package opsmetrics) serves operators on
	// the admin listener, never a team: it reads every team's fleet state.
	"OpsReplicaList":    "opsmetrics: the admin listener's fleet series; no caller, operators only",
	"OpsNodeList":       "opsmetrics: the admin listener's node series; no caller, operators only",
	"OpsEndpointList":   "opsmetrics: the admin listener's endpoint series; no caller, operators only",
	"OpsRolloutCounts":  "opsmetrics: the admin listener's rollout counts; no caller, operators only",
	"OpsVersionSLAList": "opsmetrics: the admin listener's latency targets; no caller, operators only",
	// The fleet's control loops act for the platform, not for a caller: they
	// read and write every team's replicas by design (fleet package).
	"EndpointBackdate":               "dev's demo only (app.backfillDemo): the demo endpoints it backfilled a week of history for, by the ids it read as the system principal; no caller reaches it",
	"EndpointSetPlacement":           "fleet reconciler: writes the placement outcome of every endpoint; no caller. endpoint.CreateGraph marks the graph endpoint it just created (scoped team, CanWrite checked) ready",
	"GPUSliceListReady":              "fleet reconciler: placement sees the whole fleet and every slice's owner; no caller",
	"ReplicaListCPUHolds":            "fleet reconciler: placement sees what every CPU replica holds on every CPU node; no caller",
	"GPUSliceListByNode":             "fleet node page: platform admins only (fleet.Service.Node checks PlatformAdmin first)",
	"ReplicaCPUUseByNode":            "fleet pages: platform admins only (fleet.Service.Nodes and Node check PlatformAdmin first)",
	"ReplicaListAll":                 "fleet reconciler: desired state of every node and the routing table of every endpoint; no caller",
	"ReplicaListByIDs":               "fleet reconciler: reads back the replicas it placed in the pass, by the ids it took; no caller",
	"ReplicaInsertMany":              "fleet reconciler: places replicas for every endpoint; team ids come from RoutingRuleListForPlacement",
	"TeamQuotaListAll":               "fleet reconciler: every team's quota caps its replicas; no caller",
	"ReplicaListForQuota":            "quota.Service.Set: platform admins only, for the team it resolved by name",
	"TeamQuotaGet":                   "quota.Service.Set/Delete: platform admins only (checked first)",
	"TeamQuotaUpsert":                "quota.Service.Set: platform admins only (checked first)",
	"TeamQuotaDelete":                "fleet.Fleet.DeleteQuota: platform admins only (checked first)",
	"ReplicaDeleteByIDs":             "fleet reconciler: scales down or removes replicas it listed with ReplicaListAll",
	"ReplicaDeleteOnLostNodes":       "fleet reconciler: a lost node's replicas are placed elsewhere, whoever owns them",
	"ReplicaDeleteByNode":            "fleet heartbeat intake: a CPU node whose cores or memory changed loses its allocations",
	"ReplicaDeleteOnChangedSlices":   "fleet heartbeat intake: a node whose GPU layout changed loses the allocations of slices gone or changed",
	"ReplicaObserve":                 "fleet heartbeat intake: the agent of the replica's node reports its state; matched by node id",
	"ReplicaObserveMetrics":          "fleet heartbeat intake: the agent of the replica's node reports its load and cold start; matched by node id",
	"ReplicaObserveLaunch":           "fleet heartbeat intake: the agent of the replica's node reports what it runs for it; matched by node id",
	"VersionRecordColdStarts":        "fleet heartbeat intake: the cold starts of the reporting node's ready replicas are kept on their versions; matched by node id",
	"VersionValidateByReadyReplicas": "fleet heartbeat intake: a version its replica on the reporting node warmed up is validated; matched by node id",
	"ReplicaListByNode":              "fleet node page: platform admins only (fleet.Service.Node checks PlatformAdmin first)",
	"RoutingRuleListForPlacement":    "fleet reconciler: the demand of every endpoint; no caller",
	"AutoscaleEndpointList":          "fleet autoscaler (leader loop): every routed endpoint's policy and count; no caller",
	"AutoscaleReplicaList":           "fleet autoscaler (leader loop): every serving replica's metrics; no caller",
	"EndpointRoutesGPUVersion":       "endpoint autoscaling: by the id of an endpoint the caller's scoped EndpointGet returned",
	"EndpointAutoscalePolicy":        "endpoint autoscaling: by the id of an endpoint the caller's scoped EndpointGet returned",
	"EndpointWake":                   "fleet wake intake: a gateway asks for a replica of an endpoint it serves from its routing table; no caller",
	"BudgetBlockingList":             "fleet reconciler: which endpoints' budgets block new replicas beyond the minimum, across teams; no caller",
	"ReplicaMoveFailing":             "fleet reconciler: moves every team's replicas that keep failing on their node; no caller",

	// Routing entries (package route) are written for the platform: by the
	// fleet reconciler for every endpoint, and by a rollout for the endpoint
	// id of the rollout row it locked in the same transaction.
	"EndpointLockForRoute":      "route.Lock/Write: the endpoint id comes from a row the caller already loaded in its transaction; returns only the name",
	"EndpointLockForRoutes":     "route.WriteAll: the fleet reconciler locks every endpoint's routing entry; no caller, no rows returned",
	"RoutingRuleListForRoutes":  "route.WriteAll: the routing rules of every endpoint for its routing entry; no caller",
	"RoutingRuleListForRoute":   "route.Write: one endpoint's rules, by an id the caller already loaded in its transaction",
	"ReplicaListReadyForRoutes": "route.WriteAll: the ready replicas of every endpoint for its routing entry; no caller",
	"ReplicaListReadyForRoute":  "route.Write: one endpoint's ready replicas, by an id the caller already loaded in its transaction",
	"ReplicaListForScrape":      "scrape.Discovery: every ready replica's metrics target for Prometheus, served only on the admin listener; no caller",
	"ExperimentListForRoutes":   "route.WriteAll: the experiment of every endpoint for its routing entry; no caller",
	"ExperimentListForRoute":    "route.Write: one endpoint's experiment, by an id the caller already loaded in its transaction",
	"GrantListForRoutes":        "route.WriteAll: the grants of every endpoint for its routing entry; no caller",
	"GrantExists":               "endpoint.MayCall: whether one named team holds a grant, asked for that team only",
	"GrantListForRoute":         "route.Write: one endpoint's grants, by an id the caller already loaded in its transaction",
	"GrantUpsert":               "insert or update; grant.Service.Grant takes the endpoint id from the scoped EndpointGet (CanWrite checked) in the same transaction",

	// Authentication: no principal, hence no teams, exists yet.
	"APIKeyGetByPrefix":    "authentication: looks a key up by its public prefix before any team is known",
	"APIKeyTouch":          "authentication: stamps last_used_at of the key that just authenticated",
	"APIKeyListActive":     "control plane only: tenant.PublishKeys republishes every active key's digest to the gateways (mp_keys); no caller, no team",
	"TeamMemberListByUser": "builds the caller's own principal (auth.LoadUser); the teams it returns are the scope",
	"IdentityListMembers":  "control plane only: auth.IdentityPublisher publishes every user's memberships to the gateways (mp_identity); no caller, no team",
	"SessionLookup":        "builds the caller's own principal from its session; the memberships it returns are the scope",

	// Keys follow their creator's membership (tenant.republishCreatorKeys).
	"APIKeyListActiveByCreator": "tenant.SetMember/RemoveMember: one member's keys of the team they resolved with TeamGetScoped and checked CanAdmin for",

	// Budgets: the checker measures every team's budgets for the platform.
	"BudgetAlertsResetChanged": "delete before BudgetUpsert; chargeback.Budgets.Set resolved the team with TeamGetScoped and the endpoint within it, and checked CanAdmin",
	"BudgetUpsert":             "insert; chargeback.Budgets.Set resolved the team with TeamGetScoped and the endpoint within it, and checked CanAdmin",
	"BudgetListAll":            "budget checker: measures every budget for the platform; no caller",
	"BudgetAlertInsert":        "budget checker: team id comes from BudgetListAll's row; no caller",

	// Blob references: the artifact store is shared by every team.
	"ModelVersionDigestsInUse":     "registry: after a failed upload, which of its blob digests any team's version lists, so the shared store keeps those; returns digests the caller just uploaded, nothing else",
	"ModelVersionDigestReferenced": "registry.Artifact: node agents fetch blobs by digest for whatever team's replica they run; returns only whether a version needs the digest",
	"NodeArtifactAllowed":          "enrollment.AuthorizeArtifact: whether a node may read a blob, by the versions of replicas placed on that node whoever owns them; returns a boolean, no team data",
	"ModelVersionManifestByDigest": "registry.Artifact: the manifest a node agent names by its digest, which it already holds from its desired state; content-addressed, no team data beyond what the digest pins",

	// Validation at registration: the validator acts for the platform.
	"ValidationCreate":          "insert; registry.RegisterVersion takes version and team ids from the version it inserted in the same transaction",
	"ValidationClaimPending":    "validator: validates every team's uploaded versions for the platform; no caller",
	"ValidationFinish":          "validator: writes the outcome of the validation it claimed with ValidationClaimPending, by its version id",
	"ModelVersionSetStatus":     "validator: sets the status of the version it claimed with ValidationClaimPending (the trigger lets only status and the memory need change)",
	"ModelVersionSetMemoryNeed": "validator: writes the memory need of the GGUF version it claimed with ValidationClaimPending, once (the trigger refuses changing it)",

	// Team names and ids, not team-owned data.
	"TeamGetByName": "platform admins only (registry.CreateModel for a team they are not in) and dev/demo seeding",
	"TeamIDByName":  "grant.Service.Grant: the owners name the consumer team of a grant; returns its id alone",
	"TeamListByIDs": "endpoint.teamName resolves the name of a team id taken from an already-scoped row",
}

// namedQuery is one "-- name: X :kind" block of a queries/*.sql file.
type namedQuery struct {
	Name string
	File string
	SQL  string
}

var nameLine = regexp.MustCompile(`^--\s*name:\s*(\w+)\s+:(\w+)\s*$`)

// parseQueries splits a queries file into its named blocks. Comment lines
// are dropped from the SQL, so a predicate only in a comment does not count.
func parseQueries(file, src string) []namedQuery {
	var out []namedQuery
	var cur *namedQuery
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if m := nameLine.FindStringSubmatch(trimmed); m != nil {
			out = append(out, namedQuery{Name: m[1], File: file})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		cur.SQL += line + "\n"
	}
	return out
}

// tableRef finds the relations a statement reads or writes: the names after
// FROM, JOIN, INTO, UPDATE and USING, and those listed after a comma in a
// FROM clause.
var tableRef = regexp.MustCompile(`(?i)\b(?:from|join|into|update|using)\s+([a-z_][a-z0-9_]*)((?:\s+(?:as\s+)?[a-z_][a-z0-9_]*)?(?:\s*,\s*[a-z_][a-z0-9_]*(?:\s+(?:as\s+)?[a-z_][a-z0-9_]*)?)*)`)

var commaTable = regexp.MustCompile(`,\s*([a-z_][a-z0-9_]*)`)

// tablesOf returns the team-owned tables q reads or changes, sorted.
func tablesOf(sql string) []string {
	seen := map[string]bool{}
	lower := strings.ToLower(sql)
	for _, m := range tableRef.FindAllStringSubmatch(lower, -1) {
		names := []string{m[1]}
		for _, c := range commaTable.FindAllStringSubmatch(m[2], -1) {
			names = append(names, c[1])
		}
		for _, n := range names {
			if teamOwned[n] {
				seen[n] = true
			}
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// scopeProblems returns one message per query on a team-owned table that has
// neither the team predicate nor an allowlist entry, and per allowlist entry
// that names no query or one that no longer needs the exemption.
func scopeProblems(qs []namedQuery, allow map[string]string) []string {
	var problems []string
	byName := map[string]namedQuery{}
	for _, q := range qs {
		if prev, dup := byName[q.Name]; dup {
			problems = append(problems, "query "+q.Name+" is defined twice ("+prev.File+", "+q.File+")")
		}
		byName[q.Name] = q
		tables := tablesOf(q.SQL)
		if len(tables) == 0 {
			continue
		}
		scoped := strings.Contains(strings.ToLower(q.SQL), teamPredicate)
		_, allowed := allow[q.Name]
		switch {
		case !scoped && !allowed:
			problems = append(problems, "query "+q.Name+" ("+q.File+") reads or changes "+strings.Join(tables, ", ")+
				" without the team predicate "+teamPredicate+"; scope it, or add it to the allowlist with a reason")
		case scoped && allowed:
			problems = append(problems, "query "+q.Name+" ("+q.File+") carries the team predicate; remove its allowlist entry")
		}
	}
	var names []string
	for n := range allow {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.TrimSpace(allow[n]) == "" {
			problems = append(problems, "allowlist entry "+n+" has no reason")
		}
		q, ok := byName[n]
		switch {
		case !ok:
			problems = append(problems, "allowlist entry "+n+" names no query in queries/*.sql; remove it")
		case len(tablesOf(q.SQL)) == 0:
			problems = append(problems, "allowlist entry "+n+" touches no team-owned table; remove it")
		}
	}
	return problems
}

func loadQueries(t *testing.T) []namedQuery {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "queries", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no queries/*.sql files found")
	}
	var qs []namedQuery
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, parseQueries(filepath.Base(f), string(b))...)
	}
	return qs
}

// TestQueriesAreTeamScoped is the accounting test of STYLE.md: every query on
// a team-owned table carries the team predicate or an allowlisted reason.
func TestQueriesAreTeamScoped(t *testing.T) {
	t.Parallel()
	qs := loadQueries(t)
	if len(qs) < 20 {
		t.Fatalf("parsed %d queries; want the whole queries/ folder (is the name line format still `-- name: X :kind`?)", len(qs))
	}
	for _, p := range scopeProblems(qs, unscoped) {
		t.Error(p)
	}
}

// TestScopedQueriesSeen guards the parser: queries known to be scoped must be
// found, touch the tables they touch, and carry the predicate.
func TestScopedQueriesSeen(t *testing.T) {
	t.Parallel()
	byName := map[string]namedQuery{}
	for _, q := range loadQueries(t) {
		byName[q.Name] = q
	}
	for name, want := range map[string]string{
		"EndpointGet":                 "endpoints,experiment_arms,experiments,model_versions,models,routing_rules,teams",
		"ModelList":                   "model_versions,models,teams",
		"RoutingRuleDeleteByEndpoint": "endpoints,routing_rules",
		"AuditList":                   "audit_log,teams",
		"APIKeyRevoke":                "api_keys",
		"EndpointDelete":              "endpoints",
		"ModelVersionCreate":          "model_versions",
		"TeamMemberUpsert":            "team_members",
		"UserGetByEmail":              "",
		"SessionInsert":               "",
	} {
		q, ok := byName[name]
		if !ok {
			t.Errorf("query %s not parsed", name)
			continue
		}
		if got := strings.Join(tablesOf(q.SQL), ","); got != want {
			t.Errorf("tablesOf(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestScopeProblems(t *testing.T) {
	t.Parallel()
	const scoped = "SELECT * FROM endpoints WHERE name = @name AND (@all_teams::boolean OR team_id = ANY(@team_ids::bigint[]));"
	tests := []struct {
		name  string
		src   string
		allow map[string]string
		want  []string // substrings, one per problem, in order
	}{
		{
			name: "scoped query passes",
			src:  "-- name: EndpointGet :one\n" + scoped,
		},
		{
			name: "unscoped read fails naming the query",
			src:  "-- name: EndpointGetByID :one\nSELECT * FROM endpoints WHERE id = @id;",
			want: []string{"query EndpointGetByID (x.sql) reads or changes endpoints without the team predicate"},
		},
		{
			name: "unscoped delete fails",
			src:  "-- name: ModelDelete :exec\nDELETE FROM models WHERE id = @id;",
			want: []string{"query ModelDelete"},
		},
		{
			name: "unscoped update fails",
			src:  "-- name: KeyRename :exec\nUPDATE api_keys SET name = @name WHERE id = @id;",
			want: []string{"query KeyRename"},
		},
		{
			name: "team table reached only through a join fails",
			src:  "-- name: Sneaky :many\nSELECT u.* FROM users u JOIN team_members m ON m.user_id = u.id WHERE m.team_id = @team_id;",
			want: []string{"query Sneaky (x.sql) reads or changes team_members"},
		},
		{
			name: "comma join is seen",
			src:  "-- name: Comma :many\nSELECT * FROM users u, audit_log a WHERE a.actor = u.email;",
			want: []string{"query Comma (x.sql) reads or changes audit_log"},
		},
		{
			name: "predicate in a comment does not count",
			src:  "-- name: Commented :one\nSELECT * FROM endpoints WHERE id = @id; -- team_ids::bigint[]",
			want: []string{"query Commented"},
		},
		{
			name:  "allowlisted unscoped query passes",
			src:   "-- name: EndpointGetByID :one\nSELECT * FROM endpoints WHERE id = @id;",
			allow: map[string]string{"EndpointGetByID": "reason"},
		},
		{
			name: "table that is not team owned passes",
			src:  "-- name: SessionGet :one\nSELECT * FROM sessions WHERE id_hash = @id_hash;",
		},
		{
			name:  "stale allowlist entry fails",
			src:   "-- name: EndpointGet :one\n" + scoped,
			allow: map[string]string{"EndpointGetByID": "reason"},
			want:  []string{"allowlist entry EndpointGetByID names no query"},
		},
		{
			name:  "allowlisted query that is now scoped fails",
			src:   "-- name: EndpointGet :one\n" + scoped,
			allow: map[string]string{"EndpointGet": "reason"},
			want:  []string{"query EndpointGet (x.sql) carries the team predicate"},
		},
		{
			name:  "allowlist entry for a query on no team table fails",
			src:   "-- name: SessionGet :one\nSELECT * FROM sessions WHERE id_hash = @id_hash;",
			allow: map[string]string{"SessionGet": "reason"},
			want:  []string{"allowlist entry SessionGet touches no team-owned table"},
		},
		{
			name:  "allowlist entry without a reason fails",
			src:   "-- name: EndpointGetByID :one\nSELECT * FROM endpoints WHERE id = @id;",
			allow: map[string]string{"EndpointGetByID": " "},
			want:  []string{"allowlist entry EndpointGetByID has no reason"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := scopeProblems(parseQueries("x.sql", tt.src), tt.allow)
			if len(got) != len(tt.want) {
				t.Fatalf("problems = %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestGeneratedQueriesMatchSources keeps the test honest about what runs: the
// SQL sqlc generated must be the SQL the test read, so an edit of db/*.sql.go
// cannot slip a query past it.
func TestGeneratedQueriesMatchSources(t *testing.T) {
	t.Parallel()
	gen, err := filepath.Glob("*.sql.go")
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range gen {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	src := map[string]bool{}
	for _, q := range loadQueries(t) {
		src[q.Name] = true
		if !strings.Contains(all.String(), "-- name: "+q.Name+" :") {
			t.Errorf("query %s (%s) has no generated code in db/; run make generate", q.Name, q.File)
		}
	}
	for _, m := range genName.FindAllStringSubmatch(all.String(), -1) {
		if !src[m[1]] {
			t.Errorf("generated query %s has no source in queries/*.sql; run make generate", m[1])
		}
	}
}

var genName = regexp.MustCompile(`(?m)^const \w+ = ` + "`" + `-- name: (\w+) :`)

// System access has one spelling, auth.System (STYLE.md: Coder's
// AsSystemRestricted): a loop or internal call that acts for every team asks
// for that principal and passes its Scope to the queries. What the
// accounting below refuses outside package auth is the two ways around it:
// a query scope written as AllTeams: true, and a principal built by hand
// (which could give itself any platform role). Platform admins are not
// affected: their AllTeams comes from Principal.Scope, whose principal auth
// built from the signed-in user's role, and reaches the queries as a
// variable. Tests may build principals and scopes as they like.

// authImport is the package whose principals the rule is about.
const authImport = "modelplane/auth"

// systemAccessProblems returns one "file:line: ..." message per place in one
// non-test source file that spells system access other than through
// auth.System. rel is the file's path from the repository root, with
// forward slashes.
func systemAccessProblems(fset *token.FileSet, rel string, f *ast.File) []string {
	inAuth := path.Dir(rel) == "auth"
	authName := "" // the file's name for modelplane/auth, "" when not imported
	for _, im := range f.Imports {
		if strings.Trim(im.Path.Value, `"`) != authImport {
			continue
		}
		authName = "auth"
		if im.Name != nil {
			authName = im.Name.Name
		}
	}
	isPrincipal := func(t ast.Expr) bool {
		switch t := t.(type) {
		case *ast.Ident:
			return inAuth && t.Name == "Principal"
		case *ast.SelectorExpr:
			x, ok := t.X.(*ast.Ident)
			return ok && authName != "" && x.Name == authName && t.Sel.Name == "Principal"
		}
		return false
	}
	var problems []string
	at := func(n ast.Node, msg string) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, msg))
	}
	// visit checks one node of a declaration of function fn ("" outside
	// functions and in methods).
	visit := func(n ast.Node, fn string) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		if isPrincipal(lit.Type) && !inAuth {
			at(lit, "principal built by hand; use auth.System(actor) for system access, or the principal auth built for the caller")
			return true
		}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, ok := kv.Key.(*ast.Ident)
			if !ok {
				continue
			}
			switch {
			case key.Name == "AllTeams" && !inAuth && isIdent(kv.Value, "true"):
				at(kv, "AllTeams: true spells system access by hand; pass the scope of auth.System(actor).Scope() (or the caller's principal's)")
			case inAuth && isPrincipal(lit.Type) && fn != "System" && (key.Name == "PlatformRole" || key.Name == "Via" && isSystemVia(kv.Value)):
				at(kv, "a principal with a platform role or Via system is built only by auth.System; others take their role from the user's or key's row")
			}
		}
		return true
	}
	for _, d := range f.Decls {
		fn := ""
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
			fn = fd.Name.Name
		}
		ast.Inspect(d, func(n ast.Node) bool { return visit(n, fn) })
	}
	return problems
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isSystemVia(e ast.Expr) bool {
	if bl, ok := e.(*ast.BasicLit); ok {
		return bl.Value == `"system"`
	}
	return isIdent(e, "ViaSystem")
}

// TestSystemAccessOnlyThroughAuthSystem walks every non-test Go file of the
// repository and fails naming each place that spells system access by hand.
func TestSystemAccessOnlyThroughAuthSystem(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	seen := 0
	sawSystem := false
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != ".." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		// The go tool ignores "_" and "." files (db/_dbtx_gen.go).
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") {
			return nil
		}
		rel, err := filepath.Rel("..", p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		seen++
		if rel == "auth/principal.go" {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "System" {
					sawSystem = true
				}
			}
		}
		for _, problem := range systemAccessProblems(fset, rel, f) {
			t.Error(problem)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 100 || !sawSystem {
		t.Fatalf("walked %d files, auth.System seen: %v; want the whole repository", seen, sawSystem)
	}
}

func TestSystemAccessProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		src  string
		want []string // substrings, one per problem, in order
	}{
		{
			name: "scope from auth.System passes",
			file: "drift/checker.go",
			src: `package drift
import "modelplane/auth"
var system = auth.System("drift-check")
func f() { all, ids := system.Scope(); _ = db.XParams{AllTeams: all, TeamIDs: ids} }`,
		},
		{
			name: "platform admin scope from the caller passes",
			file: "endpoint/endpoint.go",
			src: `package endpoint
func f(p *auth.Principal) { all, ids := p.Scope(); _ = db.XParams{AllTeams: all, TeamIDs: ids}; _ = db.YParams{AllTeams: p.PlatformAdmin()} }`,
		},
		{
			name: "AllTeams true outside auth fails naming the line",
			file: "rollout/controller.go",
			src: `package rollout

func f() { _ = db.XParams{ID: 1, AllTeams: true, TeamIDs: []int64{}} }`,
			want: []string{"rollout/controller.go:3: AllTeams: true spells system access by hand"},
		},
		{
			name: "AllTeams false for one resolved team passes",
			file: "chargeback/budget.go",
			src:  `package chargeback; func f(id int64) { _ = db.XParams{AllTeams: false, TeamIDs: []int64{id}} }`,
		},
		{
			name: "hand-built principal outside auth fails",
			file: "app/demo.go",
			src: `package app
import "modelplane/auth"
var system = &auth.Principal{Name: "x", Via: "system", PlatformRole: auth.RolePlatformAdmin}`,
			want: []string{"app/demo.go:3: principal built by hand"},
		},
		{
			name: "hand-built principal under another import name fails",
			file: "bench/bench.go",
			src: `package bench
import a "modelplane/auth"
var finance = a.Principal{PlatformRole: a.RoleFinance}`,
			want: []string{"bench/bench.go:3: principal built by hand"},
		},
		{
			name: "a Principal type of another package passes",
			file: "gateway/x.go",
			src:  `package gateway; type Principal struct{ Name string }; var p = Principal{Name: "x"}`,
		},
		{
			name: "auth.System itself passes",
			file: "auth/principal.go",
			src: `package auth
func System(actor string) *Principal { return &Principal{Name: actor, Via: ViaSystem, PlatformRole: RolePlatformAdmin} }
func (p *Principal) Scope() (bool, []int64) { return true, []int64{} }`,
		},
		{
			name: "auth's authenticators take the role from the row",
			file: "auth/session.go",
			src: `package auth
func f(row R) *Principal { p := &Principal{UserID: row.UserID, Name: row.Email, Via: "session"}; p.PlatformRole = Role(*row.PlatformRole); return p }`,
		},
		{
			name: "a role or Via system set by a literal elsewhere in auth fails",
			file: "auth/apikey.go",
			src: `package auth
func f() *Principal { return &Principal{Name: "k", PlatformRole: RoleFinance} }
func g() *Principal { return &Principal{Name: "k", Via: "system"} }`,
			want: []string{"auth/apikey.go:2: a principal with a platform role", "auth/apikey.go:3: a principal with a platform role"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, tt.file, tt.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			got := systemAccessProblems(fset, tt.file, f)
			if len(got) != len(tt.want) {
				t.Fatalf("problems = %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}
