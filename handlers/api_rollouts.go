package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/auth"
	"modelplane/rollout"
)

// RolloutStart is the body that starts a rollout; zero fields take the
// defaults (docs/rollouts.md).
type RolloutStart struct {
	Version  string               `json:"version" doc:"The candidate; the incumbent is the version serving 100 percent now."`
	Strategy string               `json:"strategy,omitempty" enum:"canary,blue-green,shadow" default:"canary"`
	Steps    []rollout.Step       `json:"steps,omitempty" doc:"Traffic percent and bake seconds per step; default 1, 5, 25, 50, 100 percent baking 600 s each (blue-green: one 100 percent step whose bake is the rollback window; shadow: one step, the mirrored percent)."`
	Criteria rollout.CriteriaSpec `json:"criteria,omitempty" doc:"Overrides of the criteria; the defaults come from the candidate's SLA."`
	// Seconds, as numbers: a rollout in a test may judge every half second.
	EvaluationIntervalSeconds float64 `json:"evaluation_interval_seconds,omitempty" minimum:"0" doc:"How often the judge looks; default 30."`
	EvaluationWindowSeconds   float64 `json:"evaluation_window_seconds,omitempty" minimum:"0" doc:"How far back it looks, never before the step started; default 300."`
	KeepSeconds               float64 `json:"keep_seconds,omitempty" minimum:"0" doc:"How long the losing version stays up after the end; default 3600."`
	AcceptWorseMetrics        bool    `json:"accept_worse_metrics,omitempty" doc:"Start even though the candidate's offline metrics are worse than a serving version's; without it such a start is 409 and says which metrics."`
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

type rolloutStartInput struct {
	Endpoint string `path:"endpoint"`
	Body     RolloutStart
}

type rolloutListInput struct {
	Endpoint string `path:"endpoint"`
	Limit    int    `query:"limit" minimum:"1" maximum:"500" default:"50"`
}

type rolloutPath struct {
	ID int64 `path:"rollout"`
}

// rolloutDecisionInput is every action's input; the body (a comment, for
// approve, reject and rollback) may be left out.
type rolloutDecisionInput struct {
	ID   int64 `path:"rollout"`
	Body *rolloutComment
}

type rolloutComment struct {
	Comment string `json:"comment,omitempty" maxLength:"2000"`
}

func (in *rolloutDecisionInput) comment() string {
	if in.Body == nil {
		return ""
	}
	return in.Body.Comment
}

func (s *Server) registerRollouts(api huma.API) {
	huma.Register(api, s.op("rollouts-start", http.MethodPost, "/endpoints/{endpoint}/rollouts", "Start a rollout", "rollouts"),
		func(ctx context.Context, in *rolloutStartInput) (*One[rollout.Rollout], error) {
			b := in.Body
			r, err := s.Rollouts.Start(ctx, principal(ctx), in.Endpoint, rollout.Spec{Version: b.Version, Strategy: b.Strategy, Steps: b.Steps,
				Criteria: b.Criteria, EvaluationInterval: seconds(b.EvaluationIntervalSeconds), EvaluationWindow: seconds(b.EvaluationWindowSeconds),
				Keep: seconds(b.KeepSeconds), AcceptWorseMetrics: b.AcceptWorseMetrics})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[rollout.Rollout]{Body: r}, nil
		})
	huma.Register(api, s.op("rollouts-list", http.MethodGet, "/endpoints/{endpoint}/rollouts", "List an endpoint's rollouts, newest first", "rollouts"),
		func(ctx context.Context, in *rolloutListInput) (*List[rollout.Rollout], error) {
			rs, err := s.Rollouts.List(ctx, principal(ctx), in.Endpoint, in.Limit)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[rollout.Rollout]{}
			out.Body.Items = rs
			return out, nil
		})
	huma.Register(api, s.op("rollout-get", http.MethodGet, "/rollouts/{rollout}", "Get a rollout with its verdicts and approvals", "rollouts"),
		func(ctx context.Context, in *rolloutPath) (*One[rollout.Rollout], error) {
			r, err := s.Rollouts.Get(ctx, principal(ctx), in.ID)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[rollout.Rollout]{Body: r}, nil
		})
	for _, a := range s.rolloutActions() {
		op := s.op("rollout-"+a.name, http.MethodPost, "/rollouts/{rollout}/"+a.name, a.summary, "rollouts")
		op.DefaultStatus = http.StatusOK
		if a.name == "canary" {
			op.DefaultStatus = http.StatusCreated
		}
		huma.Register(api, op, func(ctx context.Context, in *rolloutDecisionInput) (*One[rollout.Rollout], error) {
			r, err := a.fn(ctx, principal(ctx), in.ID, in.comment())
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[rollout.Rollout]{Body: r}, nil
		})
	}
}

// rolloutAction is one thing a person does to a rollout: an API operation
// and a button of the rollout page.
type rolloutAction struct {
	name, summary string
	fn            func(ctx context.Context, p *auth.Principal, id int64, comment string) (rollout.Rollout, error)
}

// rolloutActions lists them once for the API and the portal.
func (s *Server) rolloutActions() []rolloutAction {
	return []rolloutAction{
		{"approve", "Approve the step to 100 percent (a team admin who did not start it)", s.Rollouts.Approve},
		{"reject", "Reject the step to 100 percent, which rolls back", s.Rollouts.Reject},
		{"rollback", "Roll back now: all traffic to the incumbent", s.Rollouts.Rollback},
		{"pause", "Pause the judge and the steps", func(ctx context.Context, p *auth.Principal, id int64, _ string) (rollout.Rollout, error) {
			return s.Rollouts.Pause(ctx, p, id)
		}},
		{"resume", "Resume; the current step bakes again", func(ctx context.Context, p *auth.Principal, id int64, _ string) (rollout.Rollout, error) {
			return s.Rollouts.Resume(ctx, p, id)
		}},
		{"canary", "End a shadow rollout and start a canary of its candidate", func(ctx context.Context, p *auth.Principal, id int64, _ string) (rollout.Rollout, error) {
			return s.Rollouts.CanaryFromShadow(ctx, p, id)
		}},
	}
}
