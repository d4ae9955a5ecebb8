package plugin

import (
	"fmt"
	"math/rand/v2"
	"os"
	"time"
)

// Level is how important a log line is.
type Level uint8

// The levels, in the WIT's order.
const (
	Trace Level = iota
	Debug
	Info
	Warn
	Error
)

// Host is what kstage offers every plugin. Inside the component the generated glue
// installs kstage's; natively (unit tests) a stand-in writes to stderr, reads the
// system clock and draws from math/rand: replace it with SetHost.
type Host interface {
	// Write a line to kstage's log, tagged with the plugin's name.
	Log(level Level, message string)
	// The engine's current time, RFC 3339 with nanoseconds (virtual in kstage sim).
	Now() string
	// 64 random bits (seeded, so reproducible, in kstage sim).
	Random() uint64
}

var host Host = native{}

// SetHost replaces the host functions (the glue installs kstage's; tests a stub).
func SetHost(h Host) { host = h }

// Log writes a line to kstage's log.
func Log(level Level, message string) { host.Log(level, message) }

// Logf formats a line for kstage's log.
func Logf(level Level, format string, args ...any) {
	host.Log(level, fmt.Sprintf(format, args...))
}

// Now is the engine's current time, RFC 3339 with nanoseconds.
func Now() string { return host.Now() }

// Random is 64 random bits from kstage (seeded in kstage sim).
func Random() uint64 { return host.Random() }

type native struct{}

func (native) Log(level Level, message string) {
	fmt.Fprintf(os.Stderr, "[%d] %s\n", level, message)
}
func (native) Now() string    { return time.Now().UTC().Format(time.RFC3339Nano) }
func (native) Random() uint64 { return rand.Uint64() }
