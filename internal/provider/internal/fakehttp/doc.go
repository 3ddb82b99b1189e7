// Package fakehttp is what the HTTP fakes of the backends
// (gcp/fakecompute, proxmox/fakepve) share: the request log and the queue
// of injected faults, matched to calls by method and path pattern.
//
// Both are safe for concurrent use. A fake takes a call's fault and logs
// the call while it serves it (under its own lock, for fakecompute), so
// that a test that reads the log once its call returned finds the call.
package fakehttp
