// Package health runs the provider health loop: every Interval it checks
// each configured provider that implements provider.Checker, concurrently
// and under Timeout, and publishes the outcome as the cluster-scoped
// ProviderHealth named after the provider. A provider without a Checker
// gets Healthy=Unknown/CheckNotSupported; a provider that leaves the
// config has its ProviderHealth deleted.
//
// # Writes
//
// A ProviderHealth is written only when something other than
// status.lastCheckTime changed (type, target, address, details, or the
// Healthy condition's status, reason or message), or when lastCheckTime is
// at least Heartbeat old. An idle fleet therefore costs one status write per
// provider per Heartbeat, whatever the Interval: with the defaults and two
// providers, 4 writes in 10 minutes. lastCheckTime is thus "when the
// status was last confirmed", at most Heartbeat + Interval old while the
// loop runs; an older one means the loop (or its leader) is gone.
//
// # Defaults
//
//   - DefaultInterval, 30s: an outage shows within about half a minute,
//     which is shorter than any human reaction to it, while a check is one
//     cheap read per provider (list listeners, read a project, ask libvirt
//     its version), so the backends' read quotas never notice. Writes do not
//     follow the interval, so a shorter one costs backend calls only.
//   - DefaultTimeout, 10s: a cross-region API call with a fresh TLS
//     handshake, or an SSH-tunnelled hypervisor, answers well within it; a
//     backend that needs longer for a health read would also stall the
//     reconciler, so calling it Timeout is the truth. It stays well under
//     the interval, so passes do not run into each other.
//   - DefaultHeartbeat, 5m: the longest lastCheckTime goes unwritten when
//     nothing changed. Ten times the interval keeps idle writes at 12 per
//     provider per hour, and 5 minutes matches the usual alerting window,
//     so a stale lastCheckTime still pages in time.
//
// # Metric
//
// egress_proxy_provider_healthy{provider,type} is 1 while the provider's
// last check found it healthy and 0 when not. A provider without a Checker
// has no series: its health is unknown, and 0 would page for a backend
// that may be fine. The series goes when the provider leaves the config.
//
// Trigger asks for a pass at once; registry.OnChange can call it so a
// reloaded config shows without waiting for the next tick.
//
// The loop is a manager.Runnable that needs leader election: only the
// leader checks and writes, so replicas never fight over the objects.
package health
