package engine

import (
	"errors"
	"testing"
)

func TestNewSchedulerConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"pages only: the defaults", Config{Pages: 8}, false},
		{"no pages", Config{}, true},
		{"negative page tokens", Config{Pages: 8, PageTokens: -1}, true},
		{"unknown reserve", Config{Pages: 8, Reserve: "later"}, true},
		{"negative max batch", Config{Pages: 8, MaxBatch: -1}, true},
		{"negative prefill cap", Config{Pages: 8, MaxPrefillTokens: -1}, true},
		{"negative context window", Config{Pages: 8, MaxModelLen: -1}, true},
		{"tenant share above 1", Config{Pages: 8, TenantBatchShare: 1.5}, true},
		{"negative tenant share", Config{Pages: 8, TenantKVShare: -0.5}, true},
		{"every field", Config{Pages: 8, PageTokens: 4, Reserve: ReserveStep, MaxBatch: 2, MaxPrefillTokens: 16,
			MaxModelLen: 32, TenantBatchShare: 0.5, TenantKVShare: 0.5, Seed: 1, PrefixCaching: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := NewScheduler(tt.cfg)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("NewScheduler(%+v) = %v; want ErrInvalidConfig", tt.cfg, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewScheduler(%+v) = %v; want a scheduler", tt.cfg, err)
			}
			wantPT := tt.cfg.PageTokens
			if wantPT == 0 {
				wantPT = DefaultPageTokens
			}
			if s.KVPages() != tt.cfg.Pages || s.PageTokens() != wantPT {
				t.Errorf("KVPages, PageTokens = %d, %d; want %d, %d", s.KVPages(), s.PageTokens(), tt.cfg.Pages, wantPT)
			}
		})
	}
}

// Without a cost model a scheduler still runs a caller's passes, and Step
// says why it cannot run one itself.
func TestStepWithoutStepTimePanics(t *testing.T) {
	t.Parallel()
	s, err := NewScheduler(Config{Pages: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(Request{ID: "a", PromptTokens: 4, OutputTokens: 1}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Step without Config.StepTime did not panic")
		}
	}()
	s.Step(0)
}
