//! Kubernetes strategic merge patch (`application/strategic-merge-patch+json`), applied
//! to JSON values with the merge-key table of [`super::schema`].
//!
//! The semantics follow `k8s.io/apimachinery/pkg/util/strategicpatch` (`mergeMap`,
//! `mergeSlice`, `normalizeElementOrder`) and the sig-api-machinery
//! `strategic-merge-patch.md`:
//!
//! - maps merge key by key; `null` deletes a key;
//! - a list with a merge key merges item by item (an item without a match is added),
//!   a list of primitives with `patchStrategy: merge` is a set, any other list is
//!   replaced;
//! - `$patch: replace` (a map, or an item of a list) replaces instead of merging,
//!   `$patch: delete` deletes the map, or the list items with the item's merge key;
//! - `$retainKeys: [..]` clears the keys of the object's map that are not listed;
//! - `$setElementOrder/<list>: [..]` orders the merged list;
//! - `$deleteFromPrimitiveList/<list>: [..]` removes values from a set;
//! - without `$setElementOrder`, a merged list keeps the patch's order for the items it
//!   names; an item of the object goes before a patched item only if it was before it in
//!   the object, so an item the patch adds lands right after the patch's items before it
//!   (first, if it is the patch's first item).
//!
//! Where this differs from Kubernetes, on purpose, is listed in the docs of
//! [`crate::patch`].

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::error::{PatchError, StrategicError};
use super::schema::{self, FieldMeta, ListStrategy, Ty};

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected error"
)]
mod tests;

/// The directive marker of a map or list item.
const DIRECTIVE: &str = "$patch";
/// The key-clearing directive of a map.
const RETAIN_KEYS: &str = "$retainKeys";
/// The prefix of the list-ordering directive.
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
/// The prefix of the set-deletion directive.
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Apply the strategic merge patch `patch` to `target`, an object of `kind`.
pub(crate) fn apply(
    target: Map<String, Value>,
    patch: &Map<String, Value>,
    kind: &str,
) -> Result<Map<String, Value>, PatchError> {
    apply_cow(target, Cow::Borrowed(patch), kind)
}

/// [`apply`] with a patch the caller gives up: the values it brings in are moved into
/// the object instead of copied. The result is the same as [`apply`]'s.
pub(crate) fn apply_owned(
    target: Map<String, Value>,
    patch: Map<String, Value>,
    kind: &str,
) -> Result<Map<String, Value>, PatchError> {
    apply_cow(target, Cow::Owned(patch), kind)
}

fn apply_cow(
    target: Map<String, Value>,
    patch: Cow<'_, Map<String, Value>>,
    kind: &str,
) -> Result<Map<String, Value>, PatchError> {
    match merge_map(target, patch, schema::root(kind), &Loc::ROOT)? {
        Merged::Map(map) => Ok(map),
        Merged::Deleted => Ok(Map::new()),
    }
}

/// The outcome of merging a patch map into a map.
enum Merged {
    /// The merged map.
    Map(Map<String, Value>),
    /// `$patch: delete`: the map goes away.
    Deleted,
}

/// Merge `patch` into `original`, a value of type `ty` at `loc`. An owned patch has its
/// values moved into `original`; a borrowed one has them copied.
fn merge_map(
    mut original: Map<String, Value>,
    patch: Cow<'_, Map<String, Value>>,
    ty: Ty,
    loc: &Loc<'_>,
) -> Result<Merged, PatchError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        match directive.as_str() {
            Some("replace") => return Ok(Merged::Map(materialize_map(patch.into_owned()))),
            Some("delete") => return Ok(Merged::Deleted),
            Some("merge") => {}
            _ => {
                return Err(loc.error(StrategicError::UnknownDirective(directive.to_string())));
            }
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        retain_keys(&mut original, &patch, retain, loc)?;
    }
    let ordered: Vec<String> = set_element_orders(&mut original, &patch, ty, loc)?
        .into_iter()
        .map(str::to_owned)
        .collect();
    // `$deleteFromPrimitiveList/<list>` goes after the other keys, in the patch's order.
    let mut deletions: Vec<(String, Value)> = Vec::new();
    let mut each = |key: Cow<'_, str>, value: Cow<'_, Value>| -> Result<(), PatchError> {
        if let Some(list) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            deletions.push((list.to_owned(), value.into_owned()));
            return Ok(());
        }
        if is_directive_key(&key) || ordered.iter().any(|done| *done == *key) {
            return Ok(());
        }
        let meta = schema::field(ty, &key);
        merge_field(&mut original, key, value, meta, loc)
    };
    match patch {
        Cow::Borrowed(patch) => {
            for (key, value) in patch {
                each(Cow::Borrowed(key), Cow::Borrowed(value))?;
            }
        }
        Cow::Owned(patch) => {
            for (key, value) in patch {
                each(Cow::Owned(key), Cow::Owned(value))?;
            }
        }
    }
    for (list, value) in &deletions {
        delete_from_primitive_list(&mut original, list, value, loc)?;
    }
    Ok(Merged::Map(original))
}

/// Merge the patch's `value` for `key` into `original`.
fn merge_field(
    original: &mut Map<String, Value>,
    key: Cow<'_, str>,
    value: Cow<'_, Value>,
    meta: FieldMeta,
    loc: &Loc<'_>,
) -> Result<(), PatchError> {
    if value.is_null() {
        original.remove(&*key);
        return Ok(());
    }
    let Some(slot) = original.get_mut(&*key) else {
        if let Some(value) = materialize(value.into_owned()) {
            original.insert(key.into_owned(), value);
        }
        return Ok(());
    };
    let here = loc.field(&key);
    let current = std::mem::take(slot);
    let merged = match (current, value) {
        (Value::Object(current), Cow::Borrowed(Value::Object(patch))) => {
            merged_map(merge_map(current, Cow::Borrowed(patch), meta.child, &here)?)
        }
        (Value::Object(current), Cow::Owned(Value::Object(patch))) => {
            merged_map(merge_map(current, Cow::Owned(patch), meta.child, &here)?)
        }
        (Value::Array(current), value)
            if matches!(meta.list, ListStrategy::Merge { .. }) && value.is_array() =>
        {
            let patch = value.as_array().map_or(&[][..], Vec::as_slice);
            Some(Value::Array(merge_list(current, patch, meta, &here)?))
        }
        (_, value) => materialize(value.into_owned()),
    };
    match merged {
        Some(merged) => *slot = merged,
        None => {
            original.remove(&*key);
        }
    }
    Ok(())
}

/// The value a merged map leaves: `None` when it was deleted.
fn merged_map(merged: Merged) -> Option<Value> {
    match merged {
        Merged::Map(map) => Some(Value::Object(map)),
        Merged::Deleted => None,
    }
}

/// Merge the patch list `patch` into the object's list `original` (a list field with
/// `patchStrategy: merge`).
fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    meta: FieldMeta,
    loc: &Loc<'_>,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    if element_kind(&original, patch, loc)? != Kind::Object {
        return Ok(merge_set(original, patch));
    }
    let Some(key) = meta.merge_key() else {
        return Err(loc.error(StrategicError::NoMergeKey));
    };

    // Special items first: `$patch: delete` removes, `$patch: replace` replaces.
    let mut items = original;
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for (index, item) in patch.iter().enumerate() {
        let Some(item) = item.as_object() else {
            continue;
        };
        let Some(directive) = item.get(DIRECTIVE) else {
            plain.push(item);
            continue;
        };
        let here = loc.index(index);
        match directive.as_str() {
            Some("delete") => {
                let value = merge_key_value(item, key, &here)?;
                items.retain(|existing| existing.get(key) != Some(value));
            }
            Some("replace") => replace = true,
            Some("merge") => return Err(here.error(StrategicError::MergeDirectiveInList)),
            _ => {
                return Err(here.error(StrategicError::UnknownDirective(directive.to_string())));
            }
        }
    }
    if replace {
        items = plain
            .drain(..)
            .map(|item| Value::Object(materialize_map(item.clone())))
            .collect();
    }

    let server_order = merge_key_values(&items, key, loc)?;
    let mut patch_order = Vec::with_capacity(plain.len());
    for item in plain {
        let value = merge_key_value(item, key, loc)?;
        patch_order.push(value.clone());
        let here = loc.item(key, value);
        match items
            .iter()
            .position(|existing| existing.get(key) == Some(value))
        {
            Some(at) => match std::mem::take(&mut items[at]) {
                Value::Object(current) => {
                    match merge_map(current, Cow::Borrowed(item), meta.child, &here)? {
                        Merged::Map(map) => items[at] = Value::Object(map),
                        Merged::Deleted => {
                            items.remove(at);
                        }
                    }
                }
                other => items[at] = other,
            },
            None => items.push(Value::Object(materialize_map(item.clone()))),
        }
    }
    Ok(order(items, &patch_order, &server_order, |item| {
        item.get(key)
    }))
}

/// Merge a list of primitives as a set: the object's values, then the patch's new ones,
/// without duplicates, ordered like Kubernetes does.
fn merge_set(original: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
    for value in original.iter().chain(patch) {
        if !merged.contains(value) {
            merged.push(value.clone());
        }
    }
    order(merged, patch, &original, itself)
}

/// Kubernetes' `normalizeElementOrder`: the items named by `patch_order` in that order,
/// the other items in `server_order`, then the two merged so an item of the object goes
/// first only when it came before the patch item in the object.
fn order(
    items: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    id: impl Fn(&Value) -> Option<&Value>,
) -> Vec<Value> {
    let position = |order: &[Value], item: &Value| -> Option<usize> {
        let id = id(item)?;
        order.iter().position(|candidate| candidate == id)
    };
    let mut patched = Vec::new();
    let mut server_only = Vec::new();
    for item in items {
        match position(patch_order, &item) {
            Some(at) => patched.push((at, position(server_order, &item), item)),
            None => server_only.push((position(server_order, &item), item)),
        }
    }
    // Stable sorts; an item missing from the order goes last.
    patched.sort_by_key(|(at, _, _)| *at);
    server_only.sort_by_key(|(at, _)| at.unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(patched.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = patched.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some((Some(l), _)), Some((_, Some(r), _))) => l < r,
            (Some(_), Some(_)) => false,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_left {
            out.extend(left.next().map(|(_, item)| item));
        } else {
            out.extend(right.next().map(|(_, _, item)| item));
        }
    }
    out
}

/// A primitive list item is its own identity.
fn itself(item: &Value) -> Option<&Value> {
    Some(item)
}

/// Apply `$retainKeys`: check every key the patch sets is listed, then drop the keys of
/// `original` that are not.
fn retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    retain: &Value,
    loc: &Loc<'_>,
) -> Result<(), PatchError> {
    let Some(retain) = retain.as_array() else {
        return Err(loc.error(StrategicError::NotAList(RETAIN_KEYS.to_owned())));
    };
    let listed = |key: &str| retain.iter().any(|kept| kept.as_str() == Some(key));
    for (key, value) in patch {
        if value.is_null() || is_directive_key(key) {
            continue;
        }
        if !listed(key) {
            return Err(loc.error(StrategicError::NotInRetainKeys(key.clone())));
        }
    }
    original.retain(|key, _| listed(key));
    Ok(())
}

/// Apply every `$setElementOrder/<list>` of `patch`: merge `<list>` and order it. Returns
/// the lists done, which the caller must not merge again.
fn set_element_orders<'p>(
    original: &mut Map<String, Value>,
    patch: &'p Map<String, Value>,
    ty: Ty,
    loc: &Loc<'_>,
) -> Result<Vec<&'p str>, PatchError> {
    let mut done = Vec::new();
    for (directive, set_order) in patch {
        let Some(list) = directive.strip_prefix(SET_ELEMENT_ORDER) else {
            continue;
        };
        let here = loc.field(list);
        let Some(set_order) = set_order.as_array() else {
            return Err(loc.error(StrategicError::NotAList(directive.clone())));
        };
        let meta = schema::field(ty, list);
        let key = meta.merge_key();
        let current = list_field(original.get(list), list, loc)?;
        let patch_list = list_field(patch.get(list), list, loc)?;
        check_set_order(
            patch_list.map_or(&[][..], Vec::as_slice),
            set_order,
            key,
            list,
            &here,
        )?;

        let server_order = match (current, key) {
            (Some(items), Some(key)) => merge_key_values(items, key, &here)?,
            (Some(items), None) => items.clone(),
            (None, _) => Vec::new(),
        };
        let merged = match (current, patch_list) {
            (Some(current), None) => current.clone(),
            (None, Some(patch_list)) => materialize_list(patch_list),
            (Some(current), Some(patch_list)) => match meta.list {
                ListStrategy::Merge { .. } => merge_list(current.clone(), patch_list, meta, &here)?,
                ListStrategy::Replace => materialize_list(patch_list),
            },
            (None, None) => continue,
        };
        let patch_order = match key {
            Some(key) => set_order
                .iter()
                .map(|item| merge_key_value_of(item, key, &here).cloned())
                .collect::<Result<Vec<_>, _>>()?,
            None => set_order.clone(),
        };
        let ordered = match key {
            Some(key) => order(merged, &patch_order, &server_order, |item| item.get(key)),
            None => order(merged, &patch_order, &server_order, itself),
        };
        original.insert(list.to_owned(), Value::Array(ordered));
        done.push(list);
    }
    Ok(done)
}

/// Kubernetes' `validatePatchWithSetOrderList`: the patch list's items (deletions and
/// other directive items aside) must appear in the `$setElementOrder` list, in order.
fn check_set_order(
    patch_list: &[Value],
    set_order: &[Value],
    key: Option<&'static str>,
    list: &str,
    loc: &Loc<'_>,
) -> Result<(), PatchError> {
    let mut items = patch_list
        .iter()
        .filter(|item| item.get(DIRECTIVE).is_none());
    let mut next = items.next();
    for expected in set_order {
        let Some(item) = next else {
            return Ok(());
        };
        let same = match key {
            Some(key) => {
                merge_key_value_of(item, key, loc)? == merge_key_value_of(expected, key, loc)?
            }
            None => item == expected,
        };
        if same {
            next = items.next();
        }
    }
    match next {
        Some(_) => Err(loc.error(StrategicError::SetElementOrderMismatch(list.to_owned()))),
        None => Ok(()),
    }
}

/// Apply `$deleteFromPrimitiveList/<list>`: remove the listed values from `<list>`.
fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    list: &str,
    values: &Value,
    loc: &Loc<'_>,
) -> Result<(), PatchError> {
    let Some(values) = values.as_array() else {
        return Err(loc.error(StrategicError::NotAList(format!(
            "{DELETE_FROM_PRIMITIVE_LIST}{list}"
        ))));
    };
    match original.get_mut(list) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) => {
            items.retain(|item| !values.contains(item));
            Ok(())
        }
        Some(_) => Err(loc
            .field(list)
            .error(StrategicError::NotAList(list.to_owned()))),
    }
}

/// A list field of a map, `None` when absent; an error when it is not a list.
fn list_field<'a>(
    value: Option<&'a Value>,
    list: &str,
    loc: &Loc<'_>,
) -> Result<Option<&'a Vec<Value>>, PatchError> {
    match value {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(_) => Err(loc
            .field(list)
            .error(StrategicError::NotAList(list.to_owned()))),
    }
}

/// The value of the merge key `key` of a list item.
fn merge_key_value<'a>(
    item: &'a Map<String, Value>,
    key: &'static str,
    loc: &Loc<'_>,
) -> Result<&'a Value, PatchError> {
    item.get(key)
        .ok_or_else(|| loc.error(StrategicError::MissingMergeKey { key }))
}

/// The value of the merge key `key` of a list item that must be an object.
fn merge_key_value_of<'a>(
    item: &'a Value,
    key: &'static str,
    loc: &Loc<'_>,
) -> Result<&'a Value, PatchError> {
    item.get(key)
        .ok_or_else(|| loc.error(StrategicError::MissingMergeKey { key }))
}

/// The merge key values of all items of a list.
fn merge_key_values(
    items: &[Value],
    key: &'static str,
    loc: &Loc<'_>,
) -> Result<Vec<Value>, PatchError> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| merge_key_value_of(item, key, &loc.index(index)).cloned())
        .collect()
}

/// The JSON type of list items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

impl Kind {
    /// The JSON type of `value`.
    fn of(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(_) => Self::Bool,
            Value::Number(_) => Self::Number,
            Value::String(_) => Self::String,
            Value::Array(_) => Self::Array,
            Value::Object(_) => Self::Object,
        }
    }
}

/// The one JSON type of the items of both lists (not both empty); an error when they
/// mix types or hold lists.
fn element_kind(original: &[Value], patch: &[Value], loc: &Loc<'_>) -> Result<Kind, PatchError> {
    let mut items = original.iter().chain(patch).map(Kind::of);
    let first = items.next().unwrap_or(Kind::Null);
    if items.any(|kind| kind != first) {
        return Err(loc.error(StrategicError::MixedListTypes));
    }
    if first == Kind::Array {
        return Err(loc.error(StrategicError::ListOfLists));
    }
    Ok(first)
}

/// Whether `key` is a directive rather than a field.
fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE
        || key == RETAIN_KEYS
        || key.starts_with(SET_ELEMENT_ORDER)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// A value the patch brings in whole, as stored: `None` for a `$patch: delete` map,
/// otherwise without `null` keys and directives. Works in place: a value without any is
/// moved through untouched.
fn materialize(mut value: Value) -> Option<Value> {
    clean(&mut value).then_some(value)
}

/// A map the patch brings in whole, without `null` keys and directives.
fn materialize_map(mut map: Map<String, Value>) -> Map<String, Value> {
    clean_map(&mut map);
    map
}

/// A list the patch brings in whole, without directive-only items (`{$patch: replace}`)
/// and `$patch: delete` items.
fn materialize_list(items: &[Value]) -> Vec<Value> {
    let mut items = items.to_vec();
    clean_list(&mut items);
    items
}

/// Strip `value` of what [`materialize`] drops; `false` when the whole value goes (a
/// `$patch: delete` map).
fn clean(value: &mut Value) -> bool {
    match value {
        Value::Object(map) if map.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") => false,
        Value::Object(map) => {
            clean_map(map);
            true
        }
        Value::Array(items) => {
            clean_list(items);
            true
        }
        _ => true,
    }
}

/// Drop the `null` values and directive keys of `map`, and clean what is left.
fn clean_map(map: &mut Map<String, Value>) {
    map.retain(|key, value| !value.is_null() && !is_directive_key(key) && clean(value));
}

/// Drop the directive-only and `$patch: delete` items of `items`, and clean what is left.
fn clean_list(items: &mut Vec<Value>) {
    items.retain_mut(|item| {
        !item
            .as_object()
            .is_some_and(|map| map.len() == 1 && map.contains_key(DIRECTIVE))
            && clean(item)
    });
}

/// Where in the object a merge is, for error messages; built on the stack, rendered only
/// on error.
#[derive(Clone, Copy)]
struct Loc<'a> {
    parent: Option<&'a Loc<'a>>,
    segment: Segment<'a>,
}

/// One step of a [`Loc`].
#[derive(Clone, Copy)]
enum Segment<'a> {
    Root,
    Field(&'a str),
    Item { key: &'a str, value: &'a Value },
    Index(usize),
}

impl<'a> Loc<'a> {
    /// The top of the object.
    const ROOT: Loc<'static> = Loc {
        parent: None,
        segment: Segment::Root,
    };

    /// The field `name` of this map.
    fn field(&'a self, name: &'a str) -> Loc<'a> {
        self.child(Segment::Field(name))
    }

    /// The item of this list whose merge key `key` is `value`.
    fn item(&'a self, key: &'a str, value: &'a Value) -> Loc<'a> {
        self.child(Segment::Item { key, value })
    }

    /// The item at `index` of this list (of the patch).
    fn index(&'a self, index: usize) -> Loc<'a> {
        self.child(Segment::Index(index))
    }

    fn child(&'a self, segment: Segment<'a>) -> Loc<'a> {
        Loc {
            parent: Some(self),
            segment,
        }
    }

    /// A strategic error at this place.
    fn error(&self, cause: StrategicError) -> PatchError {
        PatchError::Strategic {
            path: self.render(),
            cause,
        }
    }

    /// `status.conditions[type=Ready]`, `spec.containers[2]`, `.` for the top.
    fn render(&self) -> String {
        let mut segments = Vec::new();
        let mut at = Some(self);
        while let Some(loc) = at {
            segments.push(loc.segment);
            at = loc.parent;
        }
        let mut out = String::new();
        for segment in segments.iter().rev() {
            match segment {
                Segment::Root => {}
                Segment::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                Segment::Item { key, value } => {
                    let value = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    out.push_str(&format!("[{key}={value}]"));
                }
                Segment::Index(index) => out.push_str(&format!("[{index}]")),
            }
        }
        if out.is_empty() {
            out.push('.');
        }
        out
    }
}
