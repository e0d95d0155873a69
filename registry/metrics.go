package registry

import (
	"fmt"
	"slices"
	"strconv"
)

// metricBetter says, for the offline metrics whose direction is known,
// whether a higher value is better. A metric not named here is shown but
// never judged better or worse.
var metricBetter = map[string]bool{
	"auc": true, "roc_auc": true, "pr_auc": true, "accuracy": true, "f1": true, "precision": true, "recall": true, "r2": true,
	"logloss": false, "log_loss": false, "rmse": false, "mae": false, "mse": false, "brier": false, "error_rate": false,
}

// WorseMetrics lists the offline metrics on which candidate is worse than
// incumbent ("auc 0.469 < 0.911"), by name, among those both state and
// whose direction is known; nil when none is.
func WorseMetrics(candidate, incumbent map[string]float64) []string {
	names := make([]string, 0, len(candidate))
	for k := range candidate {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []string
	for _, k := range names {
		higher, known := metricBetter[k]
		was, both := incumbent[k]
		now := candidate[k]
		if !known || !both || now == was {
			continue
		}
		f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
		switch {
		case higher && now < was:
			out = append(out, fmt.Sprintf("%s %s < %s (higher is better)", k, f(now), f(was)))
		case !higher && now > was:
			out = append(out, fmt.Sprintf("%s %s > %s (lower is better)", k, f(now), f(was)))
		}
	}
	return out
}
