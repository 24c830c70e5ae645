//! The admin bearer token, read from `admin.token_file` at each load.

/// Reads the admin token: the file's contents without surrounding
/// whitespace, at least 16 characters.
pub(super) fn read_token(
    path: &std::path::Path,
) -> Result<crate::trust::credential::Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let token = text.trim();
    if token.len() < 16 {
        return Err(format!(
            "the token in {} is shorter than 16 characters; generate one, e.g. head -c 24 /dev/urandom | base64 > {}",
            path.display(),
            path.display()
        ));
    }
    Ok(crate::trust::credential::Secret::new(token))
}
