package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"modelplane/endpoint"
	"modelplane/web"
)

// batchingFrom reads the dynamic batcher's fields of an endpoint form. A
// blank field takes endpoint.DefaultBatching's value; one that is not a
// number is recorded in errs. The domain checks the bounds.
func batchingFrom(r *http.Request, errs web.FieldErrors) (web.BatchingForm, endpoint.Batching) {
	f := web.BatchingForm{MaxBatchSize: r.PostFormValue("max_batch_size"), MaxQueueDelayUS: r.PostFormValue("max_queue_delay_us"),
		PreferredBatchSizes: r.PostFormValue("preferred_batch_sizes"), QueueTimeoutMS: r.PostFormValue("queue_timeout_ms")}
	b := endpoint.DefaultBatching
	if strings.TrimSpace(f.MaxBatchSize) != "" {
		b.MaxBatchSize = intField(errs, r, "max_batch_size")
	}
	if strings.TrimSpace(f.MaxQueueDelayUS) != "" {
		b.MaxQueueDelayUS = intField(errs, r, "max_queue_delay_us")
	}
	if strings.TrimSpace(f.QueueTimeoutMS) != "" {
		b.QueueTimeoutMS = intField(errs, r, "queue_timeout_ms")
	}
	if v := strings.TrimSpace(f.PreferredBatchSizes); v != "" {
		b.PreferredBatchSizes = []int32{}
		for _, part := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(part), 10, 32)
			if err != nil {
				errs["preferred_batch_sizes"] = "must be whole numbers separated by commas"
				break
			}
			b.PreferredBatchSizes = append(b.PreferredBatchSizes, int32(n))
		}
	}
	return f, b
}

// batchingForm shows an endpoint's batching settings in its form.
func batchingForm(b endpoint.Batching) web.BatchingForm {
	sizes := make([]string, len(b.PreferredBatchSizes))
	for i, n := range b.PreferredBatchSizes {
		sizes[i] = strconv.Itoa(int(n))
	}
	return web.BatchingForm{MaxBatchSize: strconv.Itoa(int(b.MaxBatchSize)), MaxQueueDelayUS: strconv.Itoa(int(b.MaxQueueDelayUS)),
		PreferredBatchSizes: strings.Join(sizes, ", "), QueueTimeoutMS: strconv.Itoa(int(b.QueueTimeoutMS))}
}
