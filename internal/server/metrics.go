package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ag-coord/ag/internal/store"
)

// metrics are the server's Prometheus series, on a registry of its own so that several servers
// in one test process do not collide.
type metrics struct {
	registry    *prometheus.Registry
	enqueued    prometheus.Counter
	claims      prometheus.Counter
	completions prometheus.Counter
	failures    prometheus.Counter
	refusals    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	changes     *prometheus.CounterVec
	sealed      prometheus.Counter
}

func newMetrics(s store.Store, waiting func() float64) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		enqueued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ag_jobs_enqueued_total", Help: "Jobs enqueued (a unique_key match is not counted).",
		}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ag_job_claims_total", Help: "Claims handed out.",
		}),
		completions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ag_job_completions_total", Help: "Completions accepted.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ag_job_failures_total", Help: "Failures accepted (retried or final).",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ag_refusals_total",
			Help: "Requests refused, by method and reason (stale_claim, lost_claim, unknown_job, missing_fencing_token, attestation, unauthenticated, permission_denied).",
		}, []string{"method", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ag_request_duration_seconds",
			Help:    "RPC latency by procedure and Connect code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"procedure", "code"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ag_gate_transitions_total",
			Help: "Changes moved by this replica's integration queue, by the state they reached (validating, queued (rebuilt), integrated, rejected, cancelled).",
		}, []string{"state"}),
	}
	m.sealed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ag_audit_events_sealed_total", Help: "Audit events this replica sealed into the chain.",
	})
	m.registry.MustRegister(m.enqueued, m.claims, m.completions, m.failures, m.refusals, m.latency, m.changes, m.sealed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		jobStateCollector{store: s})
	if waiting != nil {
		m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ag_long_polls_waiting", Help: "Long-polling requests (claims, lease acquisitions, change waits) waiting on this replica.",
		}, waiting))
	}
	return m
}

func (m *metrics) changeSettled(c store.Change) {
	m.changes.WithLabelValues(string(c.State)).Inc()
}

func (m *metrics) refusal(method, reason string) {
	m.refusals.WithLabelValues(method, reason).Inc()
}

// jobStateCollector reads the number of jobs by state from the store at scrape time, so every
// replica reports the shared truth rather than what it saw.
type jobStateCollector struct {
	store store.Store
}

var jobsDesc = prometheus.NewDesc("ag_jobs", "Jobs by state, as the store holds them.", []string{"state"}, nil)

func (c jobStateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobsDesc }

func (c jobStateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.store.CountJobs(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(jobsDesc, err)
		return
	}
	for _, st := range []store.JobState{store.JobQueued, store.JobClaimed, store.JobCompleted, store.JobFailed, store.JobCancelled} {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}
