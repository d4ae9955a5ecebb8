//! Checks a parsed template the way Go's parser does and `gotmpl` does not: every function
//! it calls must exist, so a misspelt function fails when the Stage loads, not when an
//! object first reaches it.

use gotmpl::parse::{BranchNode, Expr, ListNode, Node, PipeNode, Pos};

/// Go's builtin template functions.
const BUILTINS: &[&str] = &[
    "and", "call", "eq", "ge", "gt", "html", "index", "js", "le", "len", "lt", "ne", "not", "or",
    "print", "printf", "println", "slice", "urlquery",
];

/// The first function called in `template` (any of its definitions) that is neither a Go
/// builtin nor accepted by `known`, with where it is.
pub(super) fn undefined_function<'t>(
    template: &'t gotmpl::Template,
    known: &dyn Fn(&str) -> bool,
) -> Option<(&'t str, Pos)> {
    let is_known = |name: &str| BUILTINS.contains(&name) || known(name);
    template
        .templates()
        .into_iter()
        .filter_map(|name| template.lookup(name))
        .find_map(|list| in_list(list, &is_known))
}

fn in_list<'t>(list: &'t ListNode, known: &dyn Fn(&str) -> bool) -> Option<(&'t str, Pos)> {
    list.nodes.iter().find_map(|node| in_node(node, known))
}

fn in_node<'t>(node: &'t Node, known: &dyn Fn(&str) -> bool) -> Option<(&'t str, Pos)> {
    match node {
        Node::List(list) => in_list(list, known),
        Node::Action(action) => in_pipe(&action.pipe, known),
        Node::If(branch) | Node::Range(branch) | Node::With(branch) => in_branch(branch, known),
        Node::Template(t) => t.pipe.as_ref().and_then(|p| in_pipe(p, known)),
        Node::Define(d) => in_list(&d.body, known),
        Node::Text(_) | Node::Break(_) | Node::Continue(_) => None,
    }
}

fn in_branch<'t>(branch: &'t BranchNode, known: &dyn Fn(&str) -> bool) -> Option<(&'t str, Pos)> {
    in_pipe(&branch.pipe, known)
        .or_else(|| in_list(&branch.body, known))
        .or_else(|| branch.else_body.as_ref().and_then(|b| in_list(b, known)))
}

fn in_pipe<'t>(pipe: &'t PipeNode, known: &dyn Fn(&str) -> bool) -> Option<(&'t str, Pos)> {
    pipe.commands
        .iter()
        .flat_map(|cmd| cmd.args.iter())
        .find_map(|expr| in_expr(expr, known))
}

fn in_expr<'t>(expr: &'t Expr, known: &dyn Fn(&str) -> bool) -> Option<(&'t str, Pos)> {
    match expr {
        Expr::Identifier(pos, name) if !known(name) => Some((name.as_str(), *pos)),
        Expr::Pipe(_, pipe) => in_pipe(pipe, known),
        Expr::Chain(_, inner, _) => in_expr(inner, known),
        _ => None,
    }
}
