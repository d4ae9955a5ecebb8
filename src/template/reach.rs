//! What part of the object a template can read: a static look at the parsed template, so
//! a render converts only that part into template data ([`super::value::from_json_pruned`]).
//!
//! The object is reachable only through dot at the top of the template, `$`, and
//! variables declared as `{{ $x := . }}` there. Every path read through them
//! (`.spec.containers`, `$root.status.phase`) is kept whole; maps on the way to a path are
//! kept with only the keys the paths name. Anything the look cannot follow makes the whole
//! object needed: the object itself used as a value (`{{ . }}`, `{{ Quote . }}`,
//! `{{ range . }}`, `{{ with $ }}`, `$x` of such a variable without fields), `{{ template }}`,
//! `{{ define }}` and `{{ block }}`.
//!
//! Pruning is invisible to the template: a field read on a kept map finds what the full
//! conversion has (a missing key is missing in both), and a path's value is converted
//! whole, so ranging, printing or passing it to a function sees the same data.

use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::parse::{BranchNode, Expr, ListNode, Node, PipeNode};

/// The part of a value a template reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The whole value.
    Whole,
    /// Only these keys of a map, each to its own depth. A value that is not a map is kept
    /// whole.
    Fields(BTreeMap<Arc<str>, Reach>),
}

impl Reach {
    /// Mark the path `fields` (below this value) as read whole.
    fn add(&mut self, fields: &[impl AsRef<str>]) {
        let Some((first, rest)) = fields.split_first() else {
            *self = Reach::Whole;
            return;
        };
        match self {
            Reach::Whole => {}
            Reach::Fields(map) => {
                let key = first.as_ref();
                match map.get_mut(key) {
                    Some(child) => child.add(rest),
                    None => {
                        let mut child = Reach::Fields(BTreeMap::new());
                        child.add(rest);
                        map.insert(Arc::from(key), child);
                    }
                }
            }
        }
    }
}

/// The part of the object `template` (named `name`) reads; [`Reach::Whole`] when the look
/// cannot tell.
pub(crate) fn of_template(template: &gotmpl::Template, name: &str) -> Reach {
    // Other definitions (`define`, `block`) could be handed the object: not followed.
    if template.templates().iter().any(|t| *t != name) {
        return Reach::Whole;
    }
    let Some(tree) = template.lookup(name) else {
        return Reach::Whole;
    };
    let mut walk = Walk {
        reach: Reach::Fields(BTreeMap::new()),
        aliases: Vec::new(),
    };
    match walk.list(tree, true) {
        Ok(()) => walk.reach,
        Err(Unknown) => Reach::Whole,
    }
}

/// The look met something it does not follow.
struct Unknown;

struct Walk {
    reach: Reach,
    /// Variables declared (anywhere) as the object itself; any variable of the same name is
    /// taken as the object, which can only keep more.
    aliases: Vec<String>,
}

impl Walk {
    fn is_root_var(&self, name: &str) -> bool {
        name == "$" || self.aliases.iter().any(|a| a == name)
    }

    /// `dot_is_root`: dot is the object here (not inside `range` or `with`).
    fn list(&mut self, list: &ListNode, dot_is_root: bool) -> Result<(), Unknown> {
        list.nodes
            .iter()
            .try_for_each(|node| self.node(node, dot_is_root))
    }

    fn node(&mut self, node: &Node, dot_is_root: bool) -> Result<(), Unknown> {
        match node {
            Node::List(list) => self.list(list, dot_is_root),
            Node::Text(_) | Node::Break(_) | Node::Continue(_) => Ok(()),
            Node::Action(action) => {
                let pipe = &action.pipe;
                // `{{ $root := . }}`: a name for the object, not a use of it.
                if dot_is_root
                    && !pipe.decl.is_empty()
                    && let [command] = pipe.commands.as_slice()
                    && let [Expr::Dot(_)] = command.args.as_slice()
                {
                    self.aliases
                        .extend(pipe.decl.iter().map(ToString::to_string));
                    return Ok(());
                }
                self.pipe(pipe, dot_is_root)
            }
            Node::If(branch) => self.branch(branch, dot_is_root, dot_is_root),
            Node::With(branch) | Node::Range(branch) => self.branch(branch, dot_is_root, false),
            Node::Template(_) | Node::Define(_) => Err(Unknown),
        }
    }

    fn branch(
        &mut self,
        branch: &BranchNode,
        dot_is_root: bool,
        body_dot_is_root: bool,
    ) -> Result<(), Unknown> {
        self.pipe(&branch.pipe, dot_is_root)?;
        self.list(&branch.body, body_dot_is_root)?;
        match &branch.else_body {
            Some(else_body) => self.list(else_body, dot_is_root),
            None => Ok(()),
        }
    }

    fn pipe(&mut self, pipe: &PipeNode, dot_is_root: bool) -> Result<(), Unknown> {
        pipe.commands
            .iter()
            .flat_map(|command| command.args.iter())
            .try_for_each(|expr| self.expr(expr, dot_is_root))
    }

    fn expr(&mut self, expr: &Expr, dot_is_root: bool) -> Result<(), Unknown> {
        match expr {
            Expr::Dot(_) if dot_is_root => Err(Unknown),
            Expr::Field(_, fields) if dot_is_root => {
                self.reach.add(fields);
                Ok(())
            }
            Expr::Variable(_, name, fields) if self.is_root_var(name) => {
                if fields.is_empty() {
                    return Err(Unknown);
                }
                self.reach.add(fields);
                Ok(())
            }
            Expr::Pipe(_, pipe) => self.pipe(pipe, dot_is_root),
            Expr::Chain(_, inner, _) => self.expr(inner, dot_is_root),
            Expr::Dot(_)
            | Expr::Field(..)
            | Expr::Variable(..)
            | Expr::Identifier(..)
            | Expr::String(..)
            | Expr::Number(..)
            | Expr::Bool(..)
            | Expr::Nil(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(src: &str) -> Reach {
        let funcs: gotmpl::FuncMap = [(
            "Quote".to_owned(),
            Arc::new(|_: &[gotmpl::Value]| Ok(gotmpl::Value::Nil)) as gotmpl::ValueFunc,
        )]
        .into_iter()
        .collect();
        let t = gotmpl::Template::new("t")
            .funcs(funcs)
            .parse(src)
            .unwrap_or_else(|e| panic!("{src}: {e}"));
        of_template(&t, "t")
    }

    fn fields(paths: &[&str]) -> Reach {
        let mut r = Reach::Fields(BTreeMap::new());
        for path in paths {
            r.add(&path.split('.').collect::<Vec<_>>());
        }
        r
    }

    #[test]
    fn paths_from_the_top_are_kept() {
        assert_eq!(
            reach("{{ .spec.nodeName }} {{ range .spec.containers }}{{ .image }}{{ end }}"),
            fields(&["spec.nodeName", "spec.containers"])
        );
        assert_eq!(
            reach(
                "{{ $root := . }}{{ range $i, $c := .spec.containers }}{{ $root.status.phase }}{{ $c.name }}{{ end }}"
            ),
            fields(&["spec.containers", "status.phase"])
        );
        assert_eq!(
            reach("{{ range .a }}{{ $.b.c }}{{ end }}{{ .b }}"),
            fields(&["a", "b"])
        );
        assert_eq!(
            reach("{{ with .a }}{{ .x }}{{ else }}{{ .y }}{{ end }}"),
            fields(&["a", "y"])
        );
        assert_eq!(reach("plain text"), fields(&[]));
    }

    #[test]
    fn the_object_as_a_value_needs_everything() {
        for src in [
            "{{ . }}",
            "{{ Quote . }}",
            "{{ . | Quote }}",
            "{{ range . }}{{ end }}",
            "{{ with $ }}{{ end }}",
            "{{ $x := . }}{{ $x }}",
            "{{ $x := $ }}{{ $x.a }}",
            "{{ (.).a }}",
            "{{ if . }}{{ end }}",
            "{{ define \"x\" }}{{ .a }}{{ end }}{{ template \"x\" .a }}",
            "{{ block \"x\" . }}{{ .a }}{{ end }}",
        ] {
            assert_eq!(reach(src), Reach::Whole, "{src}");
        }
        // Inside `range` and `with`, dot is not the object.
        assert_eq!(reach("{{ range .a }}{{ . }}{{ end }}"), fields(&["a"]));
    }
}
