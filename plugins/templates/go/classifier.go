// Package {{name_go}} is {{name}}, a kstage classifier plugin written in Go.
//
// It decides what a failed step does next: 409 Conflict refreshes, 404 and 410 drop the
// job quietly, a step that failed MaxAttempts times is dropped with a warning, 429 and
// 5xx are retried after the server's Retry-After (else RetryMs), anything else gets
// kstage's backoff.
package {{name_go}}

import "kstage.dev/plugin"

const (
	// MaxAttempts is how many failures of one step drop the job.
	MaxAttempts = 5
	// RetryMs is the wait before retrying a 429 or 5xx without Retry-After.
	RetryMs = 1000
)

func init() {
	plugin.Register(plugin.Plugin{Name: "{{name}}", Version: "0.1.0", Classify: Classify})
}

// Classify is the classifier.
func Classify(f *plugin.Failure) plugin.Decision {
	// The object the step saw: plugin.ParseObject(f.Object).
	var status uint16
	if f.Kind == plugin.HTTP && f.Status != nil {
		status = *f.Status
	}
	switch {
	case status == 409:
		return plugin.Refresh()
	case status == 404 || status == 410:
		return plugin.Drop(false)
	case f.Attempt+1 >= MaxAttempts: // Attempt counts the failures before this one
		return plugin.Drop(true)
	case status == 429 || status >= 500:
		if f.RetryAfterMs != nil {
			return plugin.RetryAfter(*f.RetryAfterMs)
		}
		return plugin.RetryAfter(RetryMs)
	}
	return plugin.Backoff()
}
