package replica

import (
	"encoding/json"
	"reflect"
	"testing"

	"modelplane/sim"
	"modelplane/sim/profile"
)

func TestParseProfileDefaultsAndFallbacks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		task    Task
		profile string
		check   func(*testing.T, behaviour)
	}{
		{"classifier without score", TaskClassification, `{}`, func(t *testing.T, b behaviour) {
			if want := sim.FitBeta(0.5, 0.25); b.score != want || b.bands != nil {
				t.Errorf("score %+v, bands %v; want %+v and no bands", b.score, b.bands, want)
			}
		}},
		{"classes keep their order", TaskClassification, `{"class_balance":{"z":1,"a":2,"m":1}}`, func(t *testing.T, b behaviour) {
			want := []profile.ClassShare{{Label: "z", Share: 0.25}, {Label: "a", Share: 0.75}, {Label: "m", Share: 1}}
			if !reflect.DeepEqual(b.bands, want) {
				t.Errorf("bands %v; want %v", b.bands, want)
			}
		}},
		{"regressor with value", TaskRegression, `{"value":{"mean":5,"sd":2},"score":{"mean":0.3,"sd":0.1}}`, func(t *testing.T, b behaviour) {
			if want := (profile.Moments{Mean: 5, SD: 2}); b.value != want {
				t.Errorf("value %+v; want %+v", b.value, want)
			}
		}},
		{"regressor falls back to score", TaskRegression, `{"score":{"mean":0.3,"sd":0.1}}`, func(t *testing.T, b behaviour) {
			if want := (profile.Moments{Mean: 0.3, SD: 0.1}); b.value != want {
				t.Errorf("value %+v; want %+v", b.value, want)
			}
		}},
		{"regressor without either", TaskRegression, ``, func(t *testing.T, b behaviour) {
			if want := (profile.Moments{Mean: 0, SD: 1}); b.value != want || b.latency != sim.FitLogNormal(0, 0) {
				t.Errorf("value %+v, latency %+v; want %+v and no latency", b.value, b.latency, want)
			}
		}},
		{"llm error rate", TaskLLM, `{"error_rate":0.25,` + llmProfile[1:], func(t *testing.T, b behaviour) {
			if b.errorRate != 0.25 {
				t.Errorf("error rate %v; want 0.25", b.errorRate)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, b, err := parseProfile(json.RawMessage(tt.profile), tt.task)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, b)
		})
	}
}
