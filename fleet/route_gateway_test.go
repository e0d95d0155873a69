package fleet_test

import (
	"reflect"
	"testing"

	"modelplane/busapi"
	"modelplane/endpoint"
)

// TestRouteCarriesGatewaySettings: the routing entry carries the shadow
// percentage, the experiment's arms, the endpoint's rate limit and timeout,
// and whether it is scaled to zero; each change is written again, and an
// ended experiment leaves the entry.
func TestRouteCarriesGatewaySettings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.heartbeat(t, "node-a", gpus(0, 2, "A100-80GB", seven1g()))
	f.endpoint(t, "fraud-ep", "fraud", "v1", "mig-1g.10gb", "critical", 1)
	if _, err := f.eps.SetTraffic(ctx, f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0, ShadowPercent: 20}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eps.Update(ctx, f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 1,
		Tier: "critical", RetentionDays: 30, RateLimitRPS: 50, RateLimitBurst: 10, TimeoutMS: 800}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	rt, ok := f.route(t, "fraud-ep")
	if !ok || len(rt.Versions) != 2 {
		t.Fatalf("route = %+v, want two versions", rt)
	}
	if v := rt.Versions[1]; v.Name != "v2" || v.Weight != 0 || v.Shadow != 20 {
		t.Errorf("v2 = %+v, want weight 0 shadow 20", v)
	}
	// An experiment arm may not be a shadow: v2 stops mirroring first.
	if _, err := f.eps.SetTraffic(ctx, f.eng, "fraud-ep", []endpoint.Weight{{Version: "v1", Weight: 100}, {Version: "v2", Weight: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eps.SetExperiment(ctx, f.eng, "fraud-ep", endpoint.Experiment{Name: "ab-1",
		Arms: []endpoint.Arm{{Version: "v2", Share: 40}, {Version: "v1", Share: 60}}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	rt, _ = f.route(t, "fraud-ep")
	wantX := &busapi.RouteExperiment{Name: "ab-1", Arms: []busapi.RouteArm{{Version: "v1", Share: 60}, {Version: "v2", Share: 40}}}
	if !reflect.DeepEqual(rt.Experiment, wantX) {
		t.Errorf("experiment = %+v, want %+v", rt.Experiment, wantX)
	}
	if rt.RateLimitRPS != 50 || rt.RateLimitBurst != 10 || rt.TimeoutMS != 800 || rt.ScaledToZero {
		t.Errorf("route settings = rate %v burst %d timeout %d zero %v, want 50, 10, 800, false", rt.RateLimitRPS, rt.RateLimitBurst, rt.TimeoutMS, rt.ScaledToZero)
	}

	if err := f.eps.EndExperiment(ctx, f.eng, "fraud-ep"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eps.Update(ctx, f.eng, "fraud-ep", endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 0, MaxReplicas: 1,
		Tier: "critical", RetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
	if p := f.reconcile(t); p.RoutesWritten != 1 {
		t.Fatalf("pass = %+v, want the changed route written", p)
	}
	rt, _ = f.route(t, "fraud-ep")
	if rt.Experiment != nil || rt.RateLimitRPS != 0 || rt.TimeoutMS != 0 || !rt.ScaledToZero {
		t.Errorf("route after the experiment ended and scaling to zero = %+v, want no experiment, defaults, scaled to zero", rt)
	}
}
