//! HTTPS for the round server: the rustls server configuration built from the PEM files
//! named in `[server.tls]`, with the ring crypto provider (no process-wide default is
//! installed, so the host links exactly one provider and never picks one at run time).
//!
//! Everything that can be wrong with the files (missing, not PEM, no certificate, no key,
//! a key that does not match the certificate) is reported here, at start-up, naming the
//! config key and the file — never at the first handshake.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use hush_fl::config::TlsSection;
use hush_fl::FlError;

/// The rustls server configuration for `tls`: TLS 1.2 and 1.3, no client certificates
/// (devices authenticate with their bearer token), HTTP/1.1 over ALPN.
pub fn server_config(tls: &TlsSection) -> Result<Arc<rustls::ServerConfig>, FlError> {
    let certs = read_certs(&tls.cert)?;
    let key = read_key(&tls.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FlError::Server(format!("TLS protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            FlError::config(
                "server.tls",
                &format!(
                    "{} and {} are not a usable certificate and key: {e}",
                    tls.cert.display(),
                    tls.key.display()
                ),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_pem(key: &str, path: &Path) -> Result<Vec<u8>, FlError> {
    std::fs::read(path)
        .map_err(|e| FlError::config(key, &format!("cannot read {}: {e}", path.display())))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, FlError> {
    const KEY: &str = "server.tls.cert";
    let pem = read_pem(KEY, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| FlError::config(KEY, &format!("{}: bad PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(FlError::config(
            KEY,
            &format!(
                "{}: no CERTIFICATE block; expected a PEM certificate chain, leaf first",
                path.display()
            ),
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, FlError> {
    const KEY: &str = "server.tls.key";
    let pem = read_pem(KEY, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        FlError::config(
            KEY,
            &format!(
                "{}: no usable private key ({e}); expected a PEM PKCS#8, PKCS#1 or SEC1 key",
                path.display()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/tls")
            .join(name)
    }

    fn section(cert: &str, key: &str) -> TlsSection {
        TlsSection {
            cert: fixture(cert),
            key: fixture(key),
        }
    }

    #[test]
    fn loads_the_test_certificate() {
        let cfg = server_config(&section("localhost.pem", "localhost.key")).unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn bad_files_name_the_key_and_the_file() {
        let msg = |t: TlsSection| server_config(&t).unwrap_err().to_string();
        let e = msg(section("missing.pem", "localhost.key"));
        assert!(
            e.contains("server.tls.cert") && e.contains("missing.pem"),
            "{e}"
        );
        // A key where the certificate should be: PEM, but no CERTIFICATE block.
        let e = msg(section("localhost.key", "localhost.key"));
        assert!(
            e.contains("server.tls.cert") && e.contains("no CERTIFICATE"),
            "{e}"
        );
        let e = msg(section("localhost.pem", "localhost.pem"));
        assert!(
            e.contains("server.tls.key") && e.contains("no usable private key"),
            "{e}"
        );
        // A key that is not the certificate's.
        let e = msg(section("localhost.pem", "other.key"));
        assert!(
            e.contains("server.tls") && e.contains("not a usable"),
            "{e}"
        );
    }
}
