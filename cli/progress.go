package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress reports an upload's bytes on w: on a terminal one line redrawn
// with bytes, rate and ETA; elsewhere a plain line at every tenth and at
// the end, so that logs stay readable.
type progress struct {
	w     io.Writer
	tty   bool
	total int64
	start time.Time

	mu        sync.Mutex
	base      int64 // bytes stored before this run: not part of the rate
	done      int64
	lastTenth int64
	lastDraw  time.Time
}

func newProgress(w io.Writer, total int64) *progress {
	p := &progress{w: w, total: total, start: time.Now(), lastTenth: -1}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// add counts n more bytes sent.
func (p *progress) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	now := time.Now()
	if p.tty {
		if now.Sub(p.lastDraw) >= 100*time.Millisecond || p.done == p.total {
			p.lastDraw = now
			fmt.Fprintf(p.w, "\r%s", p.line(now))
		}
		return
	}
	if p.total > 0 {
		if tenth := p.done * 10 / p.total; tenth > p.lastTenth && tenth < 10 {
			p.lastTenth = tenth
			fmt.Fprintf(p.w, "upload %s\n", p.line(now))
		}
	}
}

// finish ends the report with the whole upload's size and rate.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	el := time.Since(p.start)
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	sent := p.done - p.base
	fmt.Fprintf(p.w, "uploaded %s in %s (%s/s)\n", bytesText(sent), el.Round(time.Millisecond), bytesText(rate(sent, el)))
}

// resume counts n bytes as done before this run: they show in the
// total done, not in the rate.
func (p *progress) resume(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.base, p.done = n, n
}

func (p *progress) line(now time.Time) string {
	el := now.Sub(p.start)
	r := rate(p.done-p.base, el)
	eta := "-"
	if r > 0 && p.total >= p.done {
		eta = (time.Duration(float64(p.total-p.done)/float64(r)) * time.Second).Round(time.Second).String()
	}
	pct := int64(100)
	if p.total > 0 {
		pct = p.done * 100 / p.total
	}
	return fmt.Sprintf("%s / %s  %3d%%  %s/s  ETA %s", bytesText(p.done), bytesText(p.total), pct, bytesText(r), eta)
}

func rate(n int64, el time.Duration) int64 {
	if el <= 0 {
		return 0
	}
	return int64(float64(n) / el.Seconds())
}

// bytesText is n in B, KiB, MiB or GiB with one decimal.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 2; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMG"[exp])
}

// countingReader counts what is read through it into a progress, and
// keeps its own count so that a failed send can be taken back.
type countingReader struct {
	r io.Reader
	p *progress
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		c.n += int64(n)
		c.p.add(n)
	}
	return n, err
}
