package sim

import (
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"
)

// box is a sandbox the workload made and has not killed.
type box struct {
	id, owner, token string
	paused           bool
}

// pool holds the live sandboxes; an operation takes one (no other
// operation gets it meanwhile) and gives it back or removes it.
type pool struct {
	mu   sync.Mutex
	all  []*box
	pos  map[*box]int
	busy map[*box]bool
	// paused counts the boxes paused.
	paused int
}

func newPool() *pool { return &pool{pos: map[*box]int{}, busy: map[*box]bool{}} }

func (p *pool) add(b *box) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pos[b] = len(p.all)
	p.all = append(p.all, b)
	if b.paused {
		p.paused++
	}
}

func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.all)
}

func (p *pool) counts() (live, paused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.all), p.paused
}

// take picks a box that is not busy and that want accepts, at random,
// and marks it busy; nil when none is.
func (p *pool) take(rng *rand.Rand, want func(*box) bool) *box {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.all)
	if n == 0 {
		return nil
	}
	ok := func(b *box) bool { return !p.busy[b] && (want == nil || want(b)) }
	for range 32 {
		if b := p.all[rng.IntN(n)]; ok(b) {
			p.busy[b] = true
			return b
		}
	}
	start := rng.IntN(n)
	for i := range n {
		if b := p.all[(start+i)%n]; ok(b) {
			p.busy[b] = true
			return b
		}
	}
	return nil
}

// release gives a taken box back, paused or not as it now is.
func (p *pool) release(b *box, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.busy, b)
	if b.paused != paused {
		if paused {
			p.paused++
		} else {
			p.paused--
		}
		b.paused = paused
	}
}

// snapshot lists every box, busy or not, for a phase that runs alone.
func (p *pool) snapshot() []*box {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.all)
}

// remove drops a box (killed, or lost with its node).
func (p *pool) remove(b *box) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.pos[b]
	if !ok {
		return
	}
	last := p.all[len(p.all)-1]
	p.all[i], p.pos[last] = last, i
	p.all = p.all[:len(p.all)-1]
	delete(p.pos, b)
	delete(p.busy, b)
	if b.paused {
		p.paused--
	}
}

// of lists the boxes a node owns that are not busy, oldest first by ID
// order (stable across runs of the same seed only as far as creates were).
func (p *pool) of(owner string, paused *bool) []*box {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*box
	for _, b := range p.all {
		if b.owner == owner && !p.busy[b] && (paused == nil || b.paused == *paused) {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// recorder keeps every latency of every operation, and its errors.
type recorder struct {
	mu      sync.Mutex
	samples map[string][]time.Duration
	errors  map[string]int
	// firstErrors keeps a few error messages of each operation.
	firstErrors map[string][]string
	// refusals counts the answers that asked to retry later (429, 503
	// with Retry-After), which the client did; firstRefusals keeps a few.
	refusals      map[string]int
	firstRefusals map[string][]string
}

func newRecorder() *recorder {
	return &recorder{samples: map[string][]time.Duration{}, errors: map[string]int{}, firstErrors: map[string][]string{},
		refusals: map[string]int{}, firstRefusals: map[string][]string{}}
}

func (r *recorder) add(op string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors[op]++
		if len(r.firstErrors[op]) < 3 {
			r.firstErrors[op] = append(r.firstErrors[op], shorten(err.Error(), 300))
		}
		return
	}
	r.samples[op] = append(r.samples[op], d)
}

// OpSummary is one operation's latencies (successful calls) and errors.
type OpSummary struct {
	Count  int `json:"count"`
	Errors int `json:"errors"`
	// Refused are the answers that asked to retry later, which the
	// client did (the latency is from its first attempt).
	Refused       int      `json:"refused,omitempty"`
	RefusedSample []string `json:"refusedSamples,omitempty"`
	P50MS         float64  `json:"p50ms"`
	P99MS         float64  `json:"p99ms"`
	MaxMS         float64  `json:"maxms"`
	Sample        []string `json:"errorSamples,omitempty"`
}

// refused counts an answer that asked the client to try again later.
func (r *recorder) refused(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusals[op]++
	if len(r.firstRefusals[op]) < 2 {
		r.firstRefusals[op] = append(r.firstRefusals[op], shorten(err.Error(), 300))
	}
}

// reset forgets what ops recorded.
func (r *recorder) reset(ops ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range ops {
		delete(r.samples, op)
		delete(r.errors, op)
		delete(r.firstErrors, op)
		delete(r.refusals, op)
		delete(r.firstRefusals, op)
	}
}

func (r *recorder) summary(op string) OpSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := summarise(r.samples[op])
	s.Errors, s.Sample = r.errors[op], append([]string(nil), r.firstErrors[op]...)
	s.Refused, s.RefusedSample = r.refusals[op], append([]string(nil), r.firstRefusals[op]...)
	return s
}

func (r *recorder) all() map[string]OpSummary {
	r.mu.Lock()
	ops := map[string]bool{}
	for op := range r.samples {
		ops[op] = true
	}
	for op := range r.errors {
		ops[op] = true
	}
	for op := range r.refusals {
		ops[op] = true
	}
	r.mu.Unlock()
	out := map[string]OpSummary{}
	for op := range ops {
		out[op] = r.summary(op)
	}
	return out
}

func summarise(ds []time.Duration) OpSummary {
	if len(ds) == 0 {
		return OpSummary{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) float64 {
		i := int(p*float64(len(s)-1) + 0.5)
		return ms(s[i])
	}
	return OpSummary{Count: len(s), P50MS: q(0.50), P99MS: q(0.99), MaxMS: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
