package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelplane/agent"
	"modelplane/busapi"
)

// logTimeout bounds one read of a pod's log through the API server, which
// asks the node's kubelet.
const logTimeout = 4 * time.Second

var _ agent.LogReader = (*Driver)(nil)

// ReadLog reads replica req.Replica's log for the control plane
// (agent.LogReader) from its pod through the API server (pods/log, which
// the API server asks of the node's kubelet): the runtime container's, or
// req.Container's (the fetch init container, the guard sidecar), of the
// running container or, with req.Previous, of its last terminated run
// (the kubelet keeps one: a crash loop's crash). A pod's log has no
// byte offsets, so the driver reads it with time stamps and the chunk's
// offsets are positions: the time stamp of a line in nanoseconds since
// the epoch. A negative offset reads the last tail lines (tailLines);
// offset 0 the log from its start; a position the lines written after
// the line at it (sinceTime, whole seconds, then the lines up to the
// position dropped). Next is the last line's position, so a follower
// asking from Next gets each line once; a log with no line yet gives
// Next 0, the start. At most max bytes come back, whole lines.
func (d *Driver) ReadLog(req busapi.LogRequest, max int) (busapi.LogChunk, error) {
	id, offset, tail := req.Replica, req.Offset, req.Tail
	d.mu.Lock()
	r := d.replicas[id]
	d.mu.Unlock()
	if r == nil {
		return busapi.LogChunk{}, fmt.Errorf("replica %s has no pod in pool %s", id, d.cfg.Pool)
	}
	container := req.Container
	if container == "" {
		container = busapi.LogContainerRuntime
	}
	if !slices.Contains(busapi.LogContainers, container) {
		return busapi.LogChunk{}, fmt.Errorf("%w: a replica's pod has no container %q to read (%s)", agent.ErrLogUnsupported,
			container, strings.Join(busapi.LogContainers, ", "))
	}
	max = min(max, busapi.MaxLogChunk)
	opts := logOptions(offset, tail, max)
	opts.Container, opts.Previous = container, req.Previous
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	raw, err := d.cfg.Client.CoreV1().Pods(r.ns).GetLogs(r.pod, opts).DoRaw(ctx)
	if err != nil {
		return busapi.LogChunk{}, fmt.Errorf("log of pod %s/%s: %s", r.ns, r.pod, refusal(raw, err))
	}
	lines := logLines(raw, opts.LimitBytes != nil && int64(len(raw)) >= *opts.LimitBytes)
	if offset < 0 {
		var next int64
		if len(lines) > 0 {
			next = lines[len(lines)-1].at
		}
		if keep := len(lines) - tail; tail <= 0 {
			lines = nil // the position of the end alone
		} else if keep > 0 {
			lines = lines[keep:]
		}
		return tailChunk(lines, next, max), nil
	}
	out := busapi.LogChunk{Offset: offset, Next: offset}
	var b bytes.Buffer
	for _, l := range lines {
		if l.at <= offset {
			continue // at or before the position asked from: read already
		}
		if b.Len() > 0 && b.Len()+len(l.text) > max {
			break
		}
		if len(l.text) > max {
			l.text = l.text[:max] // one line longer than a chunk: its start
		}
		b.Write(l.text)
		out.Next = l.at
	}
	out.Data, out.Size = b.String(), out.Next
	return out, nil
}

// refusal is why the API server refused a log request: the message of
// the Status it answered (for a refusal of the kubelet's, such as a
// container waiting to start, the kubelet's own words), which the client
// does not decode from a log's text answer; else err.
func refusal(raw []byte, err error) string {
	var st metav1.Status
	if json.Unmarshal(raw, &st) == nil && st.Kind == "Status" && strings.TrimSpace(st.Message) != "" {
		return strings.TrimSpace(st.Message)
	}
	return err.Error()
}

// logOptions is the pods/log request for ReadLog's arguments: the runtime
// container (ReadLog names another), with time stamps, from the end
// (tailLines) or from a position (sinceTime in whole seconds, a window of
// max bytes and a chunk more for the time stamps and the lines before the
// position).
func logOptions(offset int64, tail, max int) *corev1.PodLogOptions {
	opts := &corev1.PodLogOptions{Container: "runtime", Timestamps: true}
	if offset < 0 {
		// One line at least: the last line's position is where a follower
		// goes on from, even when no line is asked for.
		n := int64(tail)
		if n < 1 {
			n = 1
		}
		opts.TailLines = &n
		return opts
	}
	limit := int64(max + busapi.MaxLogChunk)
	opts.LimitBytes = &limit
	if offset > 0 {
		since := metav1.NewTime(time.Unix(0, offset).UTC().Truncate(time.Second))
		opts.SinceTime = &since
	}
	return opts
}

// tailChunk is the last of lines within max bytes (of a last line
// longer than that, its end); Next is the last line's position, or 0 when
// the log has no line yet.
func tailChunk(lines []logLine, next int64, max int) busapi.LogChunk {
	out := busapi.LogChunk{Offset: next, Next: next, Size: next}
	start, size := len(lines), 0
	for start > 0 && size+len(lines[start-1].text) <= max {
		size += len(lines[start-1].text)
		start--
	}
	if start == len(lines) && start > 0 {
		l := lines[start-1]
		out.Offset, out.Data = l.at, string(l.text[len(l.text)-max:])
		return out
	}
	var b bytes.Buffer
	for _, l := range lines[start:] {
		b.Write(l.text)
	}
	if start < len(lines) {
		out.Offset = lines[start].at
	}
	out.Data = b.String()
	return out
}

// logLine is one line of a pod's log read with time stamps: its position
// and its text with the newline.
type logLine struct {
	at   int64
	text []byte
}

// logLines splits a log read with time stamps into lines; cut says the
// read stopped at its byte limit, so a last line without a newline is
// not whole yet and is left for the next read. A line whose stamp does
// not parse belongs to the line before it (the kubelet stamps every
// line it writes, so this is only the log's first bytes after a
// rotation).
func logLines(raw []byte, cut bool) []logLine {
	var out []logLine
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		var line []byte
		if i < 0 {
			if cut {
				break
			}
			line, raw = raw, nil
		} else {
			line, raw = raw[:i+1], raw[i+1:]
		}
		stamp, text, ok := bytes.Cut(line, []byte(" "))
		at, err := time.Parse(time.RFC3339Nano, string(stamp))
		if !ok || err != nil {
			if n := len(out); n > 0 {
				out[n-1].text = append(out[n-1].text, line...)
			}
			continue
		}
		out = append(out, logLine{at: at.UnixNano(), text: text})
	}
	return out
}
