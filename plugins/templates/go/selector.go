// Package {{name_go}} is {{name}}, a kstage selector plugin written in Go.
//
// It plays the heaviest candidate Stage (the first of equal weights) instead of
// kstage's weighted random choice, and lets no Stage wait longer than MaxDelayMs.
package {{name_go}}

import "kstage.dev/plugin"

// MaxDelayMs is the longest a chosen Stage may wait, in milliseconds.
const MaxDelayMs = 1000

func init() {
	plugin.Register(plugin.Plugin{Name: "{{name}}", Version: "0.1.0", Select: Select})
}

// Select is the selector. A returned error is the `err` answer.
func Select(obj *plugin.Object, candidates plugin.Candidates) (*plugin.Selection, error) {
	// The object is at hand: obj.GetString(".spec.nodeName"), obj.Label("app").
	heaviest := candidates.Heaviest()
	if heaviest.DelayMs != nil && *heaviest.DelayMs > MaxDelayMs {
		return plugin.ChooseWithDelay(heaviest, MaxDelayMs), nil
	}
	// Without a delay of its own, kstage keeps the delay it drew.
	return plugin.Choose(heaviest), nil
}
