//! {{name}}: a kstage renderer plugin.
//!
//! A Stage's template is JSON in which `${stage}` becomes the name of the Stage being
//! played and `${now}` kstage's current time; the rest is sent as written (kstage checks
//! that the result is JSON).

use kstage_plugin as kp;

struct {{NameCamel}};

impl kp::Plugin for {{NameCamel}} {
    fn info() -> kp::Info {
        kp::Info::new("{{name}}", "0.1.0")
    }
}

impl kp::Renderer for {{NameCamel}} {
    fn render(stage: &str, template: &str, _object: &kp::Object) -> Result<String, String> {
        // The object is at hand: `_object.get_str(".metadata.name")`, `_object.label("app")`.
        let mut json = template.replace("${stage}", stage);
        if json.contains("${now}") {
            json = json.replace("${now}", &kp::host::now());
        }
        Ok(json)
    }
}

kp::export!({{NameCamel}}: renderer);
