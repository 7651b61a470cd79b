package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sprof/sprof/collector"
	"github.com/sprof/sprof/exporters"
	"github.com/sprof/sprof/exporters/otlp"
	"github.com/sprof/sprof/exporters/pyroscope"
	"github.com/sprof/sprof/pipeline"
	"github.com/sprof/sprof/stacks"
)

// Defaults of Config's zero fields.
const (
	DefaultInterval     = 15 * time.Second
	DefaultQueue        = 20 // intervals: five minutes of outage at 15 s
	DefaultKeep         = 240
	DefaultRetryBackoff = time.Second
	DefaultFlushTimeout = 10 * time.Second
)

// Memory defaults of `sprof agent`, which must stay small on every host
// it runs on. A symbol table unused for an interval is dropped anyway; the
// budgets bound what a host running many programs at once costs.
// scripts/agent-rss.sh measures the agent's RSS: on a 2-CPU VM shared with
// continuous Go builds, whose new binaries the agent keeps converting to
// GSYM, 300 extra processes at 19 Hz, the steady RSS went from a median of
// 174 MB (256 MiB budgets, no limit) to 82-100 MB with these, and the peak
// from 261 MB to 128-176 MB.
const (
	// DefaultSymbolCache bounds the symbol tables kept in memory: GSYM
	// files map, so a table costs little more than the pages its lookups
	// touch.
	DefaultSymbolCache = 16 << 20
	// DefaultUnwindCache bounds the unwind tables kept (libc's is about
	// 1 MiB).
	DefaultUnwindCache = 16 << 20
	// DefaultMemoryLimit is the Go runtime's soft memory limit: without
	// one the heap grows to twice what is live before a collection,
	// and a GSYM conversion's garbage would double the agent's RSS.
	DefaultMemoryLimit = 48 << 20
)

// Recorder is where the agent's profiles come from: the BPF pipeline
// (OpenBPF) or, in tests, a fake. Drain and Cut are called on the agent's
// drain goroutine; an Interval is resolved on another, while the drains
// go on.
type Recorder interface {
	// Drain moves the samples waiting now into the current interval.
	Drain() error
	// Cut ends the interval under way and starts the next one (see
	// collector.Collector.CutInterval); it returns at once, leaving the
	// frames to be named by the Interval's Resolve.
	Cut() Interval
	// SymbolizerStats reports the symbolizer's work, for the metrics;
	// it may be called on any goroutine.
	SymbolizerStats() SymbolizerStats
}

// Interval is one interval cut from a Recorder.
type Interval interface {
	// Resolve names the frames and returns the profile; after ctx is
	// done, what is not named yet stays unnamed.
	Resolve(ctx context.Context) *stacks.Profile
	// Stats describe the interval, complete once Resolve returned.
	Stats() collector.Stats
}

// A notifier is a Recorder whose ring asks to be drained before the next
// drain period (pipeline.Pipeline.Ready).
type notifier interface{ Ready() <-chan struct{} }

// A tableNotifier is a Recorder that builds unwind tables in the
// background and asks for a drain to take each one as it is done
// (pipeline.Pipeline.TablesBuilt).
type tableNotifier interface{ TablesBuilt() <-chan struct{} }

// An unwindReporter is a Recorder that unwinds stack copies in userspace;
// its statistics are read on the drain goroutine at every cut.
type unwindReporter interface{ UnwindStats() collector.UnwindStats }

// SymbolizerStats is what a symbolizer reports of its work; each part is
// nil when the symbolizer does not count it, so the metrics leave it out
// rather than show zeros.
type SymbolizerStats = pipeline.SymbolizerStats

// Config says how often to profile and where profiles go. At least one of
// Pyroscope, OTLP and OutputDir must be set.
type Config struct {
	// Interval is the time one profile covers; DefaultInterval if zero.
	Interval time.Duration
	// DrainEvery is how often samples are moved out of the kernel's
	// ring; collector.DefaultInterval if zero.
	DrainEvery time.Duration
	// ServiceName files every profile under one service; when empty each
	// process is a service named after its command (pyroscope.Services).
	// ProcRoot ("" means /proc) is where a process's command name is read
	// when its main thread had no sample.
	ServiceName string
	ProcRoot    string
	// ProcessRoot adds a root frame naming each sample's process, which
	// tells programs apart inside one service.
	ProcessRoot exporters.ProcessRoot
	// Pyroscope, when not nil, is where profiles are pushed. Its
	// ServiceName and credentials are set by the agent for every push;
	// its Host and Labels label every series.
	Pyroscope *pyroscope.Config
	// OTLP, when not nil, is an OpenTelemetry profiles endpoint profiles
	// are sent to as well, one resource per series; Host is their
	// host.name.
	OTLP *otlp.Config
	Host string
	// Credentials, when not nil, returns the credentials to push with. It
	// is called at the start and on every Reload, so that a rotated
	// secret is picked up without a restart.
	Credentials func() (Credentials, error)
	// IngestionRate (bytes per second) and IngestionBurst (bytes) are the
	// destination tenant's ingestion rate limit, which the requests to
	// Pyroscope and to OTLP are paced to (see pyroscope.Limits); zero
	// takes Pyroscope's defaults, a negative IngestionRate paces nothing.
	IngestionRate  float64
	IngestionBurst int
	// Queue is how many intervals wait while Pyroscope is unreachable
	// before the oldest is dropped; DefaultQueue if zero.
	Queue int
	// RetryBackoff is the first wait after a failed push, doubled after
	// every failure up to Interval; DefaultRetryBackoff if zero. The
	// Pyroscope client's own retries come first.
	RetryBackoff time.Duration
	// FlushTimeout bounds the pushes at exit; DefaultFlushTimeout if zero.
	FlushTimeout time.Duration
	// OutputDir, when not empty, receives each interval's profiles as
	// pprof files, of which the newest Keep intervals (DefaultKeep if
	// zero) are kept.
	OutputDir string
	Keep      int
	// Metrics, when not nil, serves the agent's metrics (GET /metrics)
	// until Run returns, which closes it.
	Metrics net.Listener
	// Log receives what goes wrong and what recovers; nil discards it.
	Log *slog.Logger
	// DebugUnwind logs, every interval, how the userspace unwinder found
	// frames per binary and why its unwinds stopped (the metrics hold
	// the totals).
	DebugUnwind bool
}

// Agent profiles continuously. Make one with New and call Run.
type Agent struct {
	cfg     Config
	rec     Recorder
	log     *slog.Logger
	metrics metrics
	pusher  *pusher      // nil without Pyroscope
	otlp    *otlp.Client // nil without OTLP
	out     *outputDir
	// deliveries are the destinations profiles are sent to, each with its
	// own queue.
	deliveries []*delivery
	reload     chan struct{}
	// sidebandWarned is set once the lack of a side band was logged.
	sidebandWarned bool
	// convertMu serializes writing and queueing intervals, which Run
	// does itself at exit past FlushTimeout. abandon is set then: an
	// interval still being named is dropped.
	convertMu sync.Mutex
	abandon   bool
}

// New checks cfg and returns an agent recording from rec. Nothing runs
// until Run.
func New(rec Recorder, cfg Config) (*Agent, error) {
	if cfg.Pyroscope == nil && cfg.OTLP == nil && cfg.OutputDir == "" {
		return nil, errors.New("agent: profiles must go somewhere: set Pyroscope, OTLP or OutputDir")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DrainEvery <= 0 {
		cfg.DrainEvery = collector.DefaultInterval
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = DefaultFlushTimeout
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	a := &Agent{cfg: cfg, rec: rec, log: cfg.Log, reload: make(chan struct{}, 1)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	pacing := pyroscope.Limits{IngestionRate: cfg.IngestionRate, IngestionBurst: cfg.IngestionBurst}
	if cfg.Pyroscope != nil {
		pc := *cfg.Pyroscope
		pc.ProcessRoot = cfg.ProcessRoot
		if pacing.IngestionRate != 0 {
			pc.Limits.IngestionRate = pacing.IngestionRate
		}
		if pacing.IngestionBurst != 0 {
			pc.Limits.IngestionBurst = pacing.IngestionBurst
		}
		p, err := newPusher(pc)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.pusher = p
	}
	if err := a.loadCredentials(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if cfg.OutputDir != "" {
		a.out = &outputDir{dir: cfg.OutputDir, keep: cfg.Keep, opts: exporters.Options{ProcessRoot: cfg.ProcessRoot}}
		if err := a.out.open(); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	if a.pusher != nil {
		a.deliveries = append(a.deliveries, a.newDelivery("pyroscope", a.pusher))
	}
	if cfg.OTLP != nil {
		c, err := otlp.New(*cfg.OTLP)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.otlp = c
		a.deliveries = append(a.deliveries, a.newDelivery("otlp", &otlpSender{client: c, host: cfg.Host, log: a.log, pace: pyroscope.NewPacer(pacing)}))
	}
	return a, nil
}

func (a *Agent) loadCredentials() error {
	if a.cfg.Credentials == nil || a.pusher == nil {
		return nil
	}
	c, err := a.cfg.Credentials()
	if err != nil {
		return err
	}
	return a.pusher.setCredentials(c)
}

// Reload asks Run to re-read the credentials and re-create the output
// directory, as on SIGHUP. It does not wait.
func (a *Agent) Reload() {
	select {
	case a.reload <- struct{}{}:
	default: // one is pending already
	}
}

// Run profiles until ctx is done, then cuts the interval under way,
// writes it and pushes what is queued within FlushTimeout. It returns an
// error only if the metrics endpoint fails; everything else is counted and
// logged, and profiling goes on.
func (a *Agent) Run(ctx context.Context) error {
	serveErr := make(chan error, 1)
	if a.cfg.Metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.MetricsHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- srv.Serve(a.cfg.Metrics) }()
		defer srv.Close()
	}
	if a.otlp != nil {
		defer a.otlp.Close()
	}
	pushCtx, stopPushing := context.WithCancel(context.Background())
	defer stopPushing()
	var delivering sync.WaitGroup
	for _, d := range a.deliveries {
		delivering.Go(func() { d.loop(pushCtx) })
	}

	// Intervals are named and sent on their own goroutine: reading the
	// debug info of fifty binaries must not stop the drains, or the ring
	// overflows and the next interval loses samples.
	cuts := make(chan Interval, a.cfg.Queue)
	converted := make(chan struct{})
	resolveCtx, stopResolving := context.WithCancel(context.Background())
	defer stopResolving()
	go func() {
		defer close(converted)
		a.convertLoop(resolveCtx, cuts)
	}()
	drain := time.NewTicker(a.cfg.DrainEvery)
	defer drain.Stop()
	cut := time.NewTicker(a.cfg.Interval)
	defer cut.Stop()
	var ready <-chan struct{} // nil, never ready, unless rec is a notifier
	if n, ok := a.rec.(notifier); ok {
		ready = n.Ready()
	}
	var built <-chan struct{}
	if n, ok := a.rec.(tableNotifier); ok {
		built = n.TablesBuilt()
	}
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-serveErr:
			err = fmt.Errorf("agent: metrics endpoint: %w", err)
			break loop
		case <-drain.C:
			a.drain()
		case <-ready:
			a.drain()
		case <-built:
			a.drain()
		case <-cut.C:
			a.enqueue(cuts, a.cut())
		}
	}
	a.enqueue(cuts, a.cut())
	close(cuts)
	// Naming the last intervals and sending them share FlushTimeout.
	// Past it, naming stops: the intervals still waiting are written and
	// queued here with the frames not named yet as binary+offset, and one
	// whose binary is still being read (a GSYM conversion) is dropped
	// when that ends.
	deadline := time.NewTimer(a.cfg.FlushTimeout)
	defer deadline.Stop()
	select {
	case <-converted:
	case <-deadline.C:
		stopResolving()
		for iv := range cuts {
			a.convert(resolveCtx, iv)
		}
		a.convertMu.Lock()
		a.abandon = true
		a.convertMu.Unlock()
		a.log.Warn("exited while an interval was being symbolized; it is not sent")
		stopPushing()
	}
	a.flush(&delivering, deadline.C, stopPushing)
	stopResolving()
	return err
}

// enqueue hands iv to the converter without blocking the drains: when
// Queue intervals wait already (their binaries take longer to read than
// intervals last), the oldest waiting is dropped and counted.
func (a *Agent) enqueue(cuts chan Interval, iv Interval) {
	for {
		select {
		case cuts <- iv:
			return
		default:
		}
		select {
		case old := <-cuts:
			done, cancel := context.WithCancel(context.Background())
			cancel()
			old.Resolve(done) // names nothing; releases what it holds
			a.metrics.skipped.Add(1)
			a.log.Warn("intervals are cut faster than their frames are named; dropped the oldest waiting", "queue", cap(cuts))
		default:
		}
	}
}

func (a *Agent) drain() {
	if err := a.rec.Drain(); err != nil {
		a.log.Debug("drain", "err", err) // counted in the interval's Stats
	}
}

// cut ends the interval on the drain goroutine, where the unwinder's
// statistics may be read.
func (a *Agent) cut() Interval {
	iv := a.rec.Cut()
	if u, ok := a.rec.(unwindReporter); ok {
		st := u.UnwindStats()
		a.metrics.unwind.Store(&st)
		if a.cfg.DebugUnwind {
			var b strings.Builder
			st.WriteText(&b)
			a.log.Info("unwinding", "stats", b.String())
		}
	}
	return iv
}

// convertLoop names, writes and queues the intervals cut, in order, and
// reloads when asked, until cuts is closed.
func (a *Agent) convertLoop(ctx context.Context, cuts <-chan Interval) {
	for {
		select {
		case iv, ok := <-cuts:
			if !ok {
				return
			}
			a.convert(ctx, iv)
		case <-a.reload:
			a.doReload()
		}
	}
}

func (a *Agent) doReload() {
	a.convertMu.Lock()
	defer a.convertMu.Unlock()
	if err := a.loadCredentials(); err != nil {
		a.log.Error("reload credentials; keeping the old ones", "err", err)
	}
	if a.out != nil {
		if err := a.out.open(); err != nil {
			a.log.Error("reopen output", "err", err)
		}
	}
	a.log.Info("reloaded")
}

// convert names an interval's frames, writes its profiles and queues them
// for Pyroscope.
func (a *Agent) convert(ctx context.Context, iv Interval) {
	p := iv.Resolve(ctx)
	a.convertMu.Lock()
	defer a.convertMu.Unlock()
	if a.abandon {
		return // Run has returned
	}
	st := iv.Stats()
	a.metrics.observe(st, p.Start.Add(p.Duration))
	if st.Errors > 0 {
		a.log.Warn("records skipped while draining", "count", st.Errors, "first", st.Err)
	}
	if st.Sideband != nil && !a.sidebandWarned {
		a.log.Warn("no process side band: processes that exit between drains may be unattributed", "err", st.Sideband)
		a.sidebandWarned = true
	}
	items := pyroscope.Split(p, pyroscope.Services(a.cfg.ServiceName, p.Samples, a.cfg.ProcRoot))
	a.log.Debug("interval", "start", p.Start, "samples", st.Samples, "lost", p.Lost, "series", len(items))
	if len(items) == 0 {
		return
	}
	if a.out != nil {
		n, errs := a.out.write(p.Start, items)
		a.metrics.filesWritten.Add(uint64(n))
		a.metrics.fileErrors.Add(uint64(len(items) - n))
		if errs != nil {
			a.log.Error("write profiles", "err", errors.Join(errs...))
		}
	}
	for _, d := range a.deliveries {
		d.add(items)
	}
}
