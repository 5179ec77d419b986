// Package status owns tpurun's status endpoint: a Monitor observes a job's events (a spec.Observer) and serves
// its live state over HTTP, /healthz for health checks and /metrics in Prometheus's text format, on a loopback
// address unless remote clients are allowed, with every connection bounded in time and number.
package status
