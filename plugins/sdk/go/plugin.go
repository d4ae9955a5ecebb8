// Package plugin writes kstage plugins in Go.
//
// A kstage plugin is a WebAssembly component that exports `metadata` and any of three
// capabilities from wit/kstage-plugin.wit: a selector (which Stage an object goes to
// next), a renderer (a Stage step's template becomes the JSON the step sends) and a
// classifier (what to do with a failed step). With this package a plugin is an
// ordinary Go package that registers plain Go functions from init:
//
//	func init() {
//		plugin.Register(plugin.Plugin{
//			Name:    "heaviest",
//			Version: "0.1.0",
//			Select: func(obj *plugin.Object, candidates plugin.Candidates) (*plugin.Selection, error) {
//				return plugin.Choose(candidates.Heaviest()), nil
//			},
//		})
//	}
//
// The build (kstage-go-build, beside this package) generates the component-model
// bindings with wit-bindgen, links them to the registered functions, and exports
// exactly the capabilities whose functions are set; kstage keeps its built-in
// behaviour for the others.
//
// Objects arrive as JSON text and are decoded once per call into an Object, with
// lookups by path: `.metadata.labels.app`, `metadata.labels["app.kubernetes.io/name"]`,
// `.status.conditions.0.type` or `.status.conditions[0].type`.
package plugin

import (
	"errors"
	"fmt"
)

// InterfaceVersion is the version of the kstage:plugin WIT package this SDK implements;
// metadata.info reports it.
const InterfaceVersion = "0.1.0"

// Plugin is what a plugin registers: who it is and a function per capability it has.
// A nil function is a capability the plugin does not export.
type Plugin struct {
	// A short name, for logs and metrics.
	Name string
	// The plugin's own version.
	Version string
	// Choose the next Stage for obj among candidates (never empty). A nil Selection
	// plays no Stage now; an error is a plugin failure, handled by the plugin's failure
	// policy. The chosen name must be one of the candidates'.
	Select func(obj *Object, candidates Candidates) (*Selection, error)
	// Render template (a step's template as written in the Stage named stage) for obj:
	// the JSON text the step sends, or an error (a plugin failure).
	Render func(stage, template string, obj *Object) (string, error)
	// Decide what happens to a failed step.
	Classify func(failure *Failure) Decision
}

// Capabilities are the names of the capabilities p exports, in WIT order.
func (p *Plugin) Capabilities() []string {
	var out []string
	if p.Select != nil {
		out = append(out, "selector")
	}
	if p.Render != nil {
		out = append(out, "renderer")
	}
	if p.Classify != nil {
		out = append(out, "classifier")
	}
	return out
}

var registered *Plugin

// Register makes p the plugin; call it once, from an init function. It panics when
// called twice, or without a name, version or capability.
func Register(p Plugin) {
	switch {
	case registered != nil:
		panic("kstage plugin: Register called twice")
	case p.Name == "" || p.Version == "":
		panic("kstage plugin: Register needs a Name and a Version")
	case len(p.Capabilities()) == 0:
		panic("kstage plugin: Register needs at least one of Select, Render, Classify")
	}
	registered = &p
}

// Registered is the registered plugin (nil before Register). The generated glue calls
// it; plugins rarely need to.
func Registered() *Plugin { return registered }

// Candidate is a Stage whose own selector matched the object.
type Candidate struct {
	// The Stage's metadata.name.
	Name string
	// Its weight for this object (weight, or what weightFrom gave); 0 if none.
	Weight int64
	// The delay kstage drew for it, in milliseconds; nil when it has no delay.
	DelayMs *int64
}

// Candidates are the candidates of one select call, in kstage's order.
type Candidates []Candidate

// Find is the candidate named name.
func (cs Candidates) Find(name string) (Candidate, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c, true
		}
	}
	return Candidate{}, false
}

// TotalWeight is the sum of the positive weights.
func (cs Candidates) TotalWeight() uint64 {
	var total uint64
	for _, c := range cs {
		if c.Weight > 0 {
			total += uint64(c.Weight)
		}
	}
	return total
}

// Weighted is the candidate at point (taken modulo TotalWeight) on the cumulative
// positive weights, in candidate order; with no positive weight, the candidate at
// point modulo the number of candidates. Give it a random or hashed number.
func (cs Candidates) Weighted(point uint64) Candidate {
	total := cs.TotalWeight()
	if total == 0 {
		return cs[point%uint64(len(cs))]
	}
	point %= total
	for _, c := range cs {
		if c.Weight <= 0 {
			continue
		}
		if point < uint64(c.Weight) {
			return c
		}
		point -= uint64(c.Weight)
	}
	return cs[len(cs)-1] // not reached: point < total
}

// Heaviest is the first candidate with the highest weight.
func (cs Candidates) Heaviest() Candidate {
	best := cs[0]
	for _, c := range cs[1:] {
		if c.Weight > best.Weight {
			best = c
		}
	}
	return best
}

// Selection is the Stage select chose.
type Selection struct {
	// The name of one of the candidates.
	Stage string
	// Wait this long (milliseconds) instead of the delay kstage drew; nil keeps
	// kstage's. Negative means now.
	DelayMs *int64
}

// Choose selects c with kstage's delay.
func Choose(c Candidate) *Selection { return &Selection{Stage: c.Name} }

// ChooseWithDelay selects c after delayMs milliseconds instead of kstage's delay.
func ChooseWithDelay(c Candidate, delayMs int64) *Selection {
	return &Selection{Stage: c.Name, DelayMs: &delayMs}
}

// FailureKind is how a step failed.
type FailureKind uint8

// The failure kinds, in the WIT's order.
const (
	ConnectionRefused FailureKind = iota
	ConnectionReset
	EOF
	Timeout
	HTTP
	Template
	Expression
	PluginFailure
	Other
)

var failureKindNames = [...]string{"connection-refused", "connection-reset", "eof",
	"timeout", "http", "template", "expression", "plugin", "other"}

// String is the kind's WIT name (`connection-refused`, `http`, ...).
func (k FailureKind) String() string {
	if int(k) < len(failureKindNames) {
		return failureKindNames[k]
	}
	return fmt.Sprintf("failure-kind(%d)", uint8(k))
}

// Failure is a failed step, with everything kstage knows about it.
type Failure struct {
	Kind FailureKind
	// The HTTP status, for HTTP; nil otherwise.
	Status *uint16
	// The Kubernetes Status reason (Conflict, NotFound, ...), if the server gave one.
	Reason *string
	// What the server or the transport said.
	Message string
	// The server's Retry-After, in milliseconds.
	RetryAfterMs *uint64
	// The Stage being played, and the index of the failed step in it (from 0).
	Stage string
	Step  uint32
	// How many times this step already failed before (0 on the first failure).
	Attempt uint32
	// The object as the step saw it, as JSON text: see ParseObject.
	Object string
}

// HasStatus reports whether the failure is an HTTP answer with status code.
func (f *Failure) HasStatus(code uint16) bool { return f.Status != nil && *f.Status == code }

// DecisionKind is what a Decision does.
type DecisionKind uint8

// The decisions, in the WIT's order.
const (
	DecideRetryAfter DecisionKind = iota
	DecideBackoff
	DecideRefresh
	DecideDrop
)

// Decision is what to do with a failed step: build it with RetryAfter, Backoff,
// Refresh or Drop.
type Decision struct {
	Kind DecisionKind
	// For DecideRetryAfter: the wait in milliseconds.
	AfterMs uint64
	// For DecideDrop: also record a Warning event on the object.
	Warn bool
}

// RetryAfter retries the same step after exactly ms milliseconds.
func RetryAfter(ms uint64) Decision { return Decision{Kind: DecideRetryAfter, AfterMs: ms} }

// Backoff retries the same step after kstage's backoff for its attempt.
func Backoff() Decision { return Decision{Kind: DecideBackoff} }

// Refresh reads the object again, then retries the same step at once.
func Refresh() Decision { return Decision{Kind: DecideRefresh} }

// Drop gives up on the job; warn also records a Warning event on the object.
func Drop(warn bool) Decision { return Decision{Kind: DecideDrop, Warn: warn} }

// Errorf is fmt.Errorf, for plugin errors.
func Errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// ErrNotJSON wraps the decoding error of an object that is not JSON.
var ErrNotJSON = errors.New("object is not JSON")
