// Package {{name_go}} is {{name}}, a kstage renderer plugin written in Go.
//
// A Stage's template is JSON in which `${stage}` becomes the name of the Stage being
// played and `${now}` kstage's current time; the rest is sent as written (kstage checks
// that the result is JSON).
package {{name_go}}

import (
	"strings"

	"kstage.dev/plugin"
)

func init() {
	plugin.Register(plugin.Plugin{Name: "{{name}}", Version: "0.1.0", Render: Render})
}

// Render is the renderer. A returned error is the `err` answer.
func Render(stage, template string, obj *plugin.Object) (string, error) {
	// The object is at hand: obj.GetString(".metadata.name"), obj.Label("app").
	json := strings.ReplaceAll(template, "${stage}", stage)
	if strings.Contains(json, "${now}") {
		json = strings.ReplaceAll(json, "${now}", plugin.Now())
	}
	return json, nil
}
