package provider

import (
	"fmt"
	"log/slog"
)

// Sensitive holds a secret (cloud-init user-data, a token). Every way of
// printing it yields a redaction that gives the length only, so that an
// accidental log line, error or event cannot leak it. Reveal is the one way
// to get the content, and is only for the backend call that needs it.
type Sensitive string

// Reveal returns the secret for the backend call that needs it.
func (s Sensitive) Reveal() string { return string(s) }

// Len is safe to log.
func (s Sensitive) Len() int { return len(s) }

func (s Sensitive) redacted() string { return fmt.Sprintf("[redacted %d bytes]", len(s)) }

// String and GoString redact for fmt's %s, %v and %#v.
func (s Sensitive) String() string   { return s.redacted() }
func (s Sensitive) GoString() string { return s.redacted() }

// Format redacts for every other verb (%q, %x, ...).
func (s Sensitive) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.redacted())) }

// MarshalJSON redacts for JSON loggers and events.
func (s Sensitive) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", s.redacted())), nil }

// MarshalText redacts for text encoders.
func (s Sensitive) MarshalText() ([]byte, error) { return []byte(s.redacted()), nil }

// MarshalLog redacts for logr sinks.
func (s Sensitive) MarshalLog() any { return s.redacted() }

// LogValue redacts for slog.
func (s Sensitive) LogValue() slog.Value { return slog.StringValue(s.redacted()) }
