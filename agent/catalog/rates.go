package catalog

import "time"

// Rates turns a runtime's counters into the heartbeat's rates; the
// process and Kubernetes drivers keep one per replica.
//
// It keeps the last reading of a runtime's counters. Between two
// readings at least a second apart the rate of tokens and the mean TTFT of
// the requests first answered in between are the heartbeat's; readings
// closer together keep the last result, and a counter that went down (the
// runtime restarted) starts over.
//
// The batcher's queue time is the mean wait of the requests answered (or,
// from vLLM's histogram, started) in between (0 when none was: nobody
// waited); at the first reading it is the runtime's mean since it
// started, which is all there is to go by.
type Rates struct {
	at                    time.Time
	tokens, ttftS, ttftN  float64
	tokensPerSecond, ttft float64
	queueN                float64 // the requests the queue total is over
	queueMS, batchQueue   float64
}

// Rate is what Rates.Update makes of a reading: tokens per second, the
// mean time to first token and the mean batch queue time, in ms.
type Rate struct {
	TokensPerSecond, TTFTMS, BatchQueueMS float64
}

// Update takes a reading made at now and returns the rates.
func (r *Rates) Update(now time.Time, m Metrics) Rate {
	queueN := float64(m.Requests)
	if m.QueueCount > 0 {
		queueN = m.QueueCount
	}
	queueMS := m.BatchQueueMS * queueN // the counter behind the mean
	if r.at.IsZero() || m.Tokens < r.tokens || m.TTFTCount < r.ttftN || queueN < r.queueN {
		r.at, r.tokens, r.ttftS, r.ttftN = now, m.Tokens, m.TTFTSeconds, m.TTFTCount
		r.queueN, r.queueMS = queueN, queueMS
		r.tokensPerSecond, r.ttft, r.batchQueue = 0, 0, m.BatchQueueMS
		return Rate{BatchQueueMS: r.batchQueue}
	}
	dt := now.Sub(r.at).Seconds()
	if dt < 1 {
		return Rate{r.tokensPerSecond, r.ttft, r.batchQueue}
	}
	r.tokensPerSecond = (m.Tokens - r.tokens) / dt
	if n := m.TTFTCount - r.ttftN; n > 0 {
		r.ttft = 1000 * (m.TTFTSeconds - r.ttftS) / n
	}
	r.batchQueue = 0
	if n := queueN - r.queueN; n > 0 {
		r.batchQueue = max(queueMS-r.queueMS, 0) / n
	}
	r.at, r.tokens, r.ttftS, r.ttftN = now, m.Tokens, m.TTFTSeconds, m.TTFTCount
	r.queueN, r.queueMS = queueN, queueMS
	return Rate{r.tokensPerSecond, r.ttft, r.batchQueue}
}
