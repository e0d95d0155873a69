package quota

import (
	"context"
	"fmt"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/field"
)

// TierCritical is the tier a team must be granted (GrantTier): its
// endpoints are placed first when GPUs are short and take GPUs from lower
// tiers' replicas beyond their minimum. Without the grant a critical
// endpoint is placed as TierStandard, so no engineer can preempt other
// teams by choosing a tier.
const (
	TierCritical = "critical"
	TierStandard = "standard"
)

// GrantTier lets team's endpoints marked tier be placed as it; platform
// admins only, audited. Only TierCritical is granted: the others need no
// grant.
func (s *Service) GrantTier(ctx context.Context, p *auth.Principal, team, tier string) error {
	return s.setTier(ctx, p, team, tier, true)
}

// RevokeTier takes the grant back: the team's critical endpoints are
// placed as standard from the next reconcile pass.
func (s *Service) RevokeTier(ctx context.Context, p *auth.Principal, team, tier string) error {
	return s.setTier(ctx, p, team, tier, false)
}

func (s *Service) setTier(ctx context.Context, p *auth.Principal, team, tier string, grant bool) error {
	if !p.PlatformAdmin() {
		return auth.ErrForbidden
	}
	if tier != TierCritical {
		return field.Errors{{Field: "tier", Message: "only the critical tier is granted"}}
	}
	all, ids := p.Scope()
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		t, err := q.TeamGetByName(ctx, team)
		if err != nil {
			return err
		}
		if err := q.TeamLock(ctx, db.TeamLockParams{ID: t.ID, AllTeams: all, TeamIDs: ids}); err != nil {
			return err
		}
		action := "team.tier.grant"
		if grant {
			if _, err := q.TeamTierGrantSet(ctx, db.TeamTierGrantSetParams{TeamID: t.ID, Tier: tier, GrantedBy: p.Actor(),
				GrantedAt: s.clock.Now()}); err != nil {
				return err
			}
		} else {
			action = "team.tier.revoke"
			if _, err := q.TeamTierGrantDelete(ctx, db.TeamTierGrantDeleteParams{TeamID: t.ID, Tier: tier}); err != nil {
				return err
			}
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &t.ID, Action: action, ObjectType: "team", ObjectName: team,
			After: map[string]string{"tier": tier}})
	})
	if err != nil {
		return fmt.Errorf("tier %s of team %s: %w", tier, team, err)
	}
	return nil
}
