// Package policy holds the differential test of the destination policy: one
// corpus of requests, run through the local provider's proxy and through the
// real Squid with the generated configuration, inside a network namespace
// the test makes (internal/testenv/netns) with a DNS server of its own
// (internal/testenv/dnstest). Every target is a catch server on the
// namespace's loopback that records which requests reached it; every
// decision must agree, and no refused request may reach anything.
package policy
