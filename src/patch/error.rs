//! The errors of the `patch` module: which patch, which operation or field, and why.

use super::PatchType;

/// Why a patch could not be wrapped or applied.
///
/// Every variant is a property of the patch (or of the patch and the object together):
/// retrying the same patch against the same object fails the same way, so none of them
/// is retryable as such. A JSON-patch `test` failure ([`PatchError::JsonPatchOpFailed`])
/// may succeed against a newer version of the object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The JSON patch document is not an array of operations.
    #[error("invalid JSON patch: {reason}")]
    InvalidJsonPatch {
        /// What is wrong with the document.
        reason: String,
    },
    /// One operation of a JSON patch is malformed (unknown `op`, missing `path`, a `path`
    /// that is not a JSON pointer, ...).
    #[error("invalid JSON patch operation {index}: {reason}")]
    InvalidJsonPatchOp {
        /// The operation's index in the patch (0-based).
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A well-formed JSON patch operation failed against the object (a path that does not
    /// exist, a `test` whose value differs, ...).
    #[error("JSON patch operation {index} ({op} {path}) failed: {reason}")]
    JsonPatchOpFailed {
        /// The operation's index in the patch (0-based).
        index: usize,
        /// The operation: `add`, `remove`, `replace`, `move`, `copy` or `test`.
        op: &'static str,
        /// The operation's `path`.
        path: String,
        /// Why it failed.
        reason: String,
    },
    /// A merge, strategic or apply patch that is not a JSON object.
    #[error("a {patch_type} patch must be a JSON object, got {found}")]
    NotAnObject {
        /// The patch type.
        patch_type: PatchType,
        /// The JSON type found instead.
        found: &'static str,
    },
    /// The object to patch is not a JSON object.
    #[error("the object to patch must be a JSON object, got {found}")]
    TargetNotAnObject {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// The rendered patch cannot be wrapped under the Stage's `root`.
    #[error("cannot wrap the patch under root {root:?}: {reason}")]
    Root {
        /// The `root` of the Stage patch.
        root: String,
        /// Why.
        reason: String,
    },
    /// A strategic merge patch (or apply) failed at a field.
    #[error("strategic merge patch failed at {path}: {cause}")]
    Strategic {
        /// Where, e.g. `status.conditions[type=Ready]` or `spec.containers`.
        path: String,
        /// Why.
        cause: StrategicError,
    },
}

/// Why a strategic merge patch failed at one field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StrategicError {
    /// `$patch` has a value other than `replace`, `merge` or `delete`.
    #[error("unknown $patch directive {0} (expected \"replace\", \"merge\" or \"delete\")")]
    UnknownDirective(String),
    /// `$patch: merge` in a list item (Kubernetes rejects it the same way).
    #[error("$patch: merge cannot be used in a list item")]
    MergeDirectiveInList,
    /// A list item (of the patch or of the object) lacks the list's merge key.
    #[error("list item has no merge key {key:?}")]
    MissingMergeKey {
        /// The merge key.
        key: &'static str,
    },
    /// A list mixes JSON types (e.g. strings and objects).
    #[error("list items do not all have the same JSON type")]
    MixedListTypes,
    /// A list of lists cannot be merged.
    #[error("lists of lists cannot be merged")]
    ListOfLists,
    /// A list of objects is declared mergeable but without a merge key.
    #[error("cannot merge a list of objects without a merge key")]
    NoMergeKey,
    /// A directive (or the field it points at) that must be a list is not one.
    #[error("{0} must be a list")]
    NotAList(String),
    /// A field set by a patch carrying `$retainKeys` is missing from that list.
    #[error("field {0:?} is set by the patch but missing from $retainKeys")]
    NotInRetainKeys(String),
    /// The order of a patch list contradicts its `$setElementOrder` list.
    #[error("the order of the patch list {0:?} does not match its $setElementOrder list")]
    SetElementOrderMismatch(String),
}
