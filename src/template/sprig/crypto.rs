//! sprig's hashes and cryptography: `sha1sum`, `sha256sum`, `sha512sum`, `adler32sum`,
//! `bcrypt`, `htpasswd`, `randBytes`, `derivePassword`, `genPrivateKey`, the certificate
//! generators (`genCA`, `genSelfSignedCert`, `genSignedCert`, their `*WithKey` forms and
//! `buildCustomCert`), `encryptAES` and `decryptAES`.
//!
//! Randomness (keys, salts, serial numbers, IVs) comes from the env, so `kstage sim`
//! repeats; under `--kwok-golden` these functions print placeholders. Key generation and
//! scrypt are charged to the render budget ([`KEY_COST`] per RSA-2048 key, scaled with
//! the cube of the size), so a Stage cannot spend minutes of CPU on one render.
//! Differences: `genPrivateKey "dsa"` is refused (DSA is deprecated and has no maintained
//! Rust implementation); certificates signed with an ECDSA key get random signature
//! nonces from the system (ring's), so they differ from run to run.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use gotmpl::{TemplateError as GoError, Value};
use rsa::pkcs1::{DecodeRsaPrivateKey as _, EncodeRsaPrivateKey as _};
use rsa::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, LineEnding};

use super::conv::{int_arg, list_arg, map, map_arg, str_arg, string};
use super::misc::placeholder;
use super::{Arity::Exact, Call, Func, f};
use crate::template::env::TemplateEnv;

/// What one RSA-2048 key generation costs against the render budget, in bytes.
pub(crate) const KEY_COST: usize = 1 << 20;

pub(crate) const FUNCS: &[Func] = &[
    f("sha1sum", Exact(1), |_, a| {
        Ok(string(digest(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            str_arg(&a[0])?,
        )))
    }),
    f("sha256sum", Exact(1), |_, a| {
        Ok(string(digest(&ring::digest::SHA256, str_arg(&a[0])?)))
    }),
    f("sha512sum", Exact(1), |_, a| {
        Ok(string(digest(&ring::digest::SHA512, str_arg(&a[0])?)))
    }),
    f("adler32sum", Exact(1), |_, a| {
        let mut hash = adler2::Adler32::new();
        hash.write_slice(str_arg(&a[0])?.as_bytes());
        Ok(string(hash.checksum().to_string()))
    }),
    f("bcrypt", Exact(1), |c, a| {
        let password = str_arg(&a[0])?;
        if c.env.golden() {
            return Ok(string(placeholder(c.name, a)));
        }
        Ok(string(bcrypt_hash(c, password)?))
    }),
    f("htpasswd", Exact(2), |c, a| {
        let (user, password) = (str_arg(&a[0])?, str_arg(&a[1])?);
        if user.contains(':') {
            return Ok(string(format!("invalid username: {user}")));
        }
        if c.env.golden() {
            return Ok(string(placeholder(c.name, a)));
        }
        Ok(string(format!("{user}:{}", bcrypt_hash(c, password)?)))
    }),
    f("randBytes", Exact(1), |c, a| {
        let n = int_arg(&a[0])?;
        if c.env.golden() {
            return Ok(string(placeholder(c.name, a)));
        }
        let n =
            usize::try_from(n).map_err(|_| c.fail("runtime error: makeslice: len out of range"))?;
        c.charge(n.saturating_mul(2))?;
        let mut buf = vec![0u8; n];
        c.env.random_bytes(&mut buf);
        Ok(string(
            base64::engine::general_purpose::STANDARD.encode(buf),
        ))
    }),
    f("derivePassword", Exact(5), derive_password),
    f("genPrivateKey", Exact(1), |c, a| {
        let kind = str_arg(&a[0])?;
        if c.env.golden() {
            return Ok(string(placeholder(c.name, a)));
        }
        gen_private_key(c, kind).map(string)
    }),
    f("buildCustomCert", Exact(2), build_custom_cert),
    f("genCA", Exact(2), |c, a| gen_ca(c, a, None)),
    f("genCAWithKey", Exact(3), |c, a| gen_ca(c, a, Some(&a[2]))),
    f("genSelfSignedCert", Exact(4), |c, a| {
        gen_self_signed(c, a, None)
    }),
    f("genSelfSignedCertWithKey", Exact(5), |c, a| {
        gen_self_signed(c, a, Some(&a[4]))
    }),
    f("genSignedCert", Exact(5), |c, a| gen_signed(c, a, None)),
    f("genSignedCertWithKey", Exact(6), |c, a| {
        gen_signed(c, a, Some(&a[5]))
    }),
    f("encryptAES", Exact(2), encrypt_aes),
    f("decryptAES", Exact(2), decrypt_aes),
];

fn digest(algorithm: &'static ring::digest::Algorithm, s: &str) -> String {
    let d = ring::digest::digest(algorithm, s.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Go's `bcrypt.GenerateFromPassword(password, DefaultCost)`: `$2a$10$...`.
fn bcrypt_hash(c: &Call<'_>, password: &str) -> Result<String, GoError> {
    if password.len() > 72 {
        return Ok(
            "failed to encrypt string with bcrypt: bcrypt: password length exceeds 72 bytes"
                .to_owned(),
        );
    }
    c.charge(KEY_COST / 8)?;
    let mut salt = [0u8; 16];
    c.env.random_bytes(&mut salt);
    bcrypt::hash_with_salt(password, 10, salt)
        .map(|parts| parts.format_for_version(bcrypt::Version::TwoA))
        .map_err(|e| c.fail(e))
}

/// A rand_core view of the env's random source, for key generation.
struct EnvRng<'a>(&'a dyn TemplateEnv);

impl rsa::rand_core::RngCore for EnvRng<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.0.random_bytes(&mut b);
        u32::from_le_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.0.random_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.random_bytes(dest);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.0.random_bytes(dest);
        Ok(())
    }
}

impl rsa::rand_core::CryptoRng for EnvRng<'_> {}

/// A private key, as sprig holds one.
enum Key {
    Rsa(Box<rsa::RsaPrivateKey>),
    Ecdsa(p256::SecretKey),
    Ed25519([u8; 32]),
}

/// The PKCS#8 prefix of an Ed25519 seed (RFC 8410).
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

impl Key {
    fn generate_rsa(c: &Call<'_>, bits: usize) -> Result<Self, GoError> {
        let scale = (bits / 2048).max(1);
        c.charge(KEY_COST.saturating_mul(scale * scale * scale))?;
        rsa::RsaPrivateKey::new(&mut EnvRng(c.env), bits)
            .map(|k| Self::Rsa(Box::new(k)))
            .map_err(|e| c.fail(format!("error generating rsa key: {e}")))
    }

    /// sprig's `pemBlockForKey`: PKCS#1 for RSA, SEC 1 for ECDSA, PKCS#8 otherwise.
    fn to_pem(&self) -> Result<String, String> {
        match self {
            Self::Rsa(k) => k
                .to_pkcs1_pem(LineEnding::LF)
                .map(|p| p.to_string())
                .map_err(|e| e.to_string()),
            Self::Ecdsa(k) => k
                .to_sec1_pem(LineEnding::LF)
                .map(|p| p.to_string())
                .map_err(|e| e.to_string()),
            Self::Ed25519(_) => Ok(pem_block("PRIVATE KEY", &self.pkcs8()?)),
        }
    }

    fn pkcs8(&self) -> Result<Vec<u8>, String> {
        match self {
            Self::Rsa(k) => k
                .to_pkcs8_der()
                .map(|d| d.as_bytes().to_vec())
                .map_err(|e| e.to_string()),
            Self::Ecdsa(k) => k
                .to_pkcs8_der()
                .map(|d| d.as_bytes().to_vec())
                .map_err(|e| e.to_string()),
            Self::Ed25519(seed) => Ok([&ED25519_PKCS8_PREFIX[..], seed].concat()),
        }
    }

    /// sprig's `parsePrivateKeyPEM`.
    fn from_pem(text: &str) -> Result<Self, String> {
        let (label, der) = parse_pem(text).ok_or("no PEM data in input")?;
        match label.as_str() {
            "PRIVATE KEY" => {
                if der.len() == 48 && der[..16] == ED25519_PKCS8_PREFIX {
                    let mut seed = [0u8; 32];
                    seed.copy_from_slice(&der[16..]);
                    return Ok(Self::Ed25519(seed));
                }
                if let Ok(k) = rsa::RsaPrivateKey::from_pkcs8_der(&der) {
                    return Ok(Self::Rsa(Box::new(k)));
                }
                p256::SecretKey::from_pkcs8_der(&der)
                    .map(Self::Ecdsa)
                    .map_err(|e| format!("decoding PEM as PKCS#8: {e}"))
            }
            "RSA PRIVATE KEY" => rsa::RsaPrivateKey::from_pkcs1_der(&der)
                .map(|k| Self::Rsa(Box::new(k)))
                .map_err(|e| format!("parsing RSA private key from PEM: {e}")),
            "EC PRIVATE KEY" => p256::SecretKey::from_sec1_der(&der)
                .map(Self::Ecdsa)
                .map_err(|e| format!("parsing EC private key from PEM: {e}")),
            other if other.ends_with(" PRIVATE KEY") => {
                Err(format!("invalid private key type {other}"))
            }
            other => Err(format!("no private key data in PEM block of type {other}")),
        }
    }

    fn key_pair(&self) -> Result<rcgen::KeyPair, String> {
        let der = self.pkcs8()?;
        rcgen::KeyPair::try_from(der.as_slice()).map_err(|e| e.to_string())
    }
}

/// A PEM block with 64-column base64 lines, as Go's `pem.Encode` writes it.
fn pem_block(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The first PEM block of `text`: its label and decoded bytes.
pub(crate) fn parse_pem(text: &str) -> Option<(String, Vec<u8>)> {
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + 11..];
    let (label, rest) = rest.split_once("-----")?;
    let end = rest.find(&format!("-----END {label}-----"))?;
    let body: String = rest[..end].chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .ok()?;
    Some((label.to_owned(), der))
}

fn gen_private_key(c: &Call<'_>, kind: &str) -> Result<String, GoError> {
    let key = match kind {
        "" | "rsa" => Key::generate_rsa(c, 4096)?,
        "ecdsa" => {
            c.charge(KEY_COST / 16)?;
            Key::Ecdsa(p256::SecretKey::random(&mut EnvRng(c.env)))
        }
        "ed25519" => {
            c.charge(KEY_COST / 16)?;
            let mut seed = [0u8; 32];
            c.env.random_bytes(&mut seed);
            Key::Ed25519(seed)
        }
        "dsa" => return Err(c.fail("dsa keys are not supported by kstage")),
        other => return Ok(format!("Unknown type {other}")),
    };
    key.to_pem()
        .map_err(|e| c.fail(format!("failed to generate private key: {e}")))
}

fn derive_password(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let counter =
        u32::try_from(int_arg(&a[0])?).map_err(|_| super::conv::wrong_type("uint32", &a[0]))?;
    let (kind, password, user, site) = (
        str_arg(&a[1])?,
        str_arg(&a[2])?,
        str_arg(&a[3])?,
        str_arg(&a[4])?,
    );
    let Some(templates) = password_templates(kind) else {
        return Ok(string(format!("cannot find password template {kind}")));
    };
    c.charge(4 * KEY_COST)?;
    const SEED: &[u8] = b"com.lyndir.masterpassword";
    let len = |s: &str| u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes();
    let salt = [SEED, &len(user), user.as_bytes()].concat();
    let mut key = [0u8; 64];
    let params = scrypt::Params::new(15, 8, 2, 64).map_err(|e| c.fail(e))?;
    scrypt::scrypt(password.as_bytes(), &salt, &params, &mut key)
        .map_err(|e| c.fail(format!("failed to derive password: {e}")))?;
    let message = [SEED, &len(site), site.as_bytes(), &counter.to_be_bytes()].concat();
    let mac_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let seed = ring::hmac::sign(&mac_key, &message);
    let seed = seed.as_ref();
    let template = templates[usize::from(seed[0]) % templates.len()];
    let out: String = template
        .bytes()
        .enumerate()
        .map(|(i, class)| {
            let chars = template_chars(class).as_bytes();
            char::from(chars[usize::from(seed[i + 1]) % chars.len()])
        })
        .collect();
    Ok(string(out))
}

/// Master Password's templates per password type.
fn password_templates(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "maximum" => &["anoxxxxxxxxxxxxxxxxx", "axxxxxxxxxxxxxxxxxno"],
        "long" => &[
            "CvcvnoCvcvCvcv",
            "CvcvCvcvnoCvcv",
            "CvcvCvcvCvcvno",
            "CvccnoCvcvCvcv",
            "CvccCvcvnoCvcv",
            "CvccCvcvCvcvno",
            "CvcvnoCvccCvcv",
            "CvcvCvccnoCvcv",
            "CvcvCvccCvcvno",
            "CvcvnoCvcvCvcc",
            "CvcvCvcvnoCvcc",
            "CvcvCvcvCvccno",
            "CvccnoCvccCvcv",
            "CvccCvccnoCvcv",
            "CvccCvccCvcvno",
            "CvcvnoCvccCvcc",
            "CvcvCvccnoCvcc",
            "CvcvCvccCvccno",
            "CvccnoCvcvCvcc",
            "CvccCvcvnoCvcc",
            "CvccCvcvCvccno",
        ],
        "medium" => &["CvcnoCvc", "CvcCvcno"],
        "short" => &["Cvcn"],
        "basic" => &["aaanaaan", "aannaaan", "aaannaaa"],
        "pin" => &["nnnn"],
        _ => return None,
    })
}

fn template_chars(class: u8) -> &'static str {
    match class {
        b'V' => "AEIOU",
        b'C' => "BCDFGHJKLMNPQRSTVWXYZ",
        b'v' => "aeiou",
        b'c' => "bcdfghjklmnpqrstvwxyz",
        b'A' => "AEIOUBCDFGHJKLMNPQRSTVWXYZ",
        b'a' => "AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz",
        b'n' => "0123456789",
        b'o' => "@&%?,=[]_:-+*$#!'^~;()/.",
        _ => "AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz0123456789!@#$%^&*()",
    }
}

/// sprig's `certificate`: `{Cert, Key}` in PEM.
fn certificate(cert: String, key: String) -> Value {
    let mut m = BTreeMap::new();
    m.insert(Arc::from("Cert"), string(cert));
    m.insert(Arc::from("Key"), string(key));
    map(m)
}

fn build_custom_cert(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let cert = b64
        .decode(str_arg(&a[0])?)
        .map_err(|_| c.fail("unable to decode base64 certificate"))?;
    let key = b64
        .decode(str_arg(&a[1])?)
        .map_err(|_| c.fail("unable to decode base64 private key"))?;
    let cert = String::from_utf8_lossy(&cert).into_owned();
    let key = String::from_utf8_lossy(&key).into_owned();
    let (_, der) = parse_pem(&cert).ok_or_else(|| c.fail("unable to decode certificate"))?;
    x509_parser::parse_x509_certificate(&der)
        .map_err(|e| c.fail(format!("error parsing certificate: decodedCert.Bytes: {e}")))?;
    Key::from_pem(&key).map_err(|e| c.fail(format!("error parsing private key: {e}")))?;
    Ok(certificate(cert, key))
}

/// The certificate's subject key: generated (RSA 2048, as sprig) or given in PEM.
fn subject_key(c: &Call<'_>, given: Option<&Value>) -> Result<Key, GoError> {
    match given {
        None => Key::generate_rsa(c, 2048),
        Some(pem) => {
            Key::from_pem(str_arg(pem)?).map_err(|e| c.fail(format!("parsing private key: {e}")))
        }
    }
}

/// sprig's `getBaseCertTemplate`: CN, IP and DNS names, valid from now for `days`,
/// a random 128-bit serial, server and client auth.
fn base_params(
    c: &Call<'_>,
    cn: &str,
    ips: &[Value],
    dns: &[Value],
    days: i64,
) -> Result<rcgen::CertificateParams, GoError> {
    let mut params = rcgen::CertificateParams::default();
    for ip in ips {
        let text = match ip {
            Value::String(s) => s,
            other => {
                return Err(c.fail(format!(
                    "error parsing ip: {} is not a string",
                    super::conv::sprint(other)
                )));
            }
        };
        let ip: std::net::IpAddr = text
            .parse()
            .map_err(|_| c.fail(format!("error parsing ip: {text}")))?;
        params.subject_alt_names.push(rcgen::SanType::IpAddress(ip));
    }
    for name in dns {
        let name = match name {
            Value::String(s) => s,
            other => {
                return Err(c.fail(format!(
                    "error processing alternate dns name: {} is not a string",
                    super::conv::sprint(other)
                )));
            }
        };
        let name = rcgen::string::Ia5String::try_from(name.to_string()).map_err(|e| c.fail(e))?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, cn);
    params.distinguished_name = dn;
    let now = c.env.now_time();
    let to_time = |t: chrono::DateTime<chrono::Utc>| {
        time::OffsetDateTime::from_unix_timestamp(t.timestamp()).ok()
    };
    let until = chrono::TimeDelta::try_days(days)
        .and_then(|d| now.checked_add_signed(d))
        .ok_or_else(|| c.fail("the validity runs past the range of times"))?;
    params.not_before = to_time(now).ok_or_else(|| c.fail("time out of range"))?;
    params.not_after = to_time(until).ok_or_else(|| c.fail("time out of range"))?;
    let mut serial = [0u8; 16];
    c.env.random_bytes(&mut serial);
    serial[0] &= 0x7f;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = false;
    Ok(params)
}

/// The golden placeholder of a certificate: `{Cert: <genCA(...).Cert>, Key: ...}`.
fn golden_certificate(c: &Call<'_>, a: &[Value]) -> Value {
    let call = placeholder(c.name, a);
    let call = call.trim_start_matches('<').trim_end_matches('>');
    certificate(format!("<{call}.Cert>"), format!("<{call}.Key>"))
}

/// The certificate of `params` signed with its own `key`, and the key, as sprig's
/// certificate dict.
fn self_signed(
    c: &Call<'_>,
    params: &rcgen::CertificateParams,
    key: &Key,
) -> Result<Value, GoError> {
    let pair = key
        .key_pair()
        .map_err(|e| c.fail(format!("error creating certificate: {e}")))?;
    let cert = params
        .self_signed(&pair)
        .map_err(|e| c.fail(format!("error creating certificate: {e}")))?;
    Ok(certificate(
        cert.pem(),
        key.to_pem().map_err(|e| c.fail(e))?,
    ))
}

fn gen_ca(c: &Call<'_>, a: &[Value], key: Option<&Value>) -> Result<Value, GoError> {
    let (cn, days) = (str_arg(&a[0])?, int_arg(&a[1])?);
    if c.env.golden() {
        return Ok(golden_certificate(c, a));
    }
    let mut params = base_params(c, cn, &[], &[], days)?;
    let key = subject_key(c, key)?;
    params.key_usages.push(rcgen::KeyUsagePurpose::KeyCertSign);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    self_signed(c, &params, &key)
}

fn gen_self_signed(c: &Call<'_>, a: &[Value], key: Option<&Value>) -> Result<Value, GoError> {
    let (cn, ips, dns, days) = (
        str_arg(&a[0])?,
        list_arg(&a[1])?,
        list_arg(&a[2])?,
        int_arg(&a[3])?,
    );
    if c.env.golden() {
        return Ok(golden_certificate(c, a));
    }
    let params = base_params(c, cn, ips, dns, days)?;
    let key = subject_key(c, key)?;
    self_signed(c, &params, &key)
}

fn gen_signed(c: &Call<'_>, a: &[Value], key: Option<&Value>) -> Result<Value, GoError> {
    let (cn, ips, dns, days) = (
        str_arg(&a[0])?,
        list_arg(&a[1])?,
        list_arg(&a[2])?,
        int_arg(&a[3])?,
    );
    let ca = map_arg(&a[4])?;
    if c.env.golden() {
        return Ok(golden_certificate(c, a));
    }
    let field = |name: &str| match ca.get(name) {
        Some(Value::String(s)) => Ok(s.to_string()),
        _ => Err(c.fail(format!("the CA has no {name} string"))),
    };
    let (ca_cert, ca_key) = (field("Cert")?, field("Key")?);
    let signer = Key::from_pem(&ca_key)
        .and_then(|k| k.key_pair())
        .map_err(|e| c.fail(format!("error parsing private key: {e}")))?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert, signer).map_err(|e| {
        c.fail(format!(
            "error parsing certificate: decodedSignerCert.Bytes: {e}"
        ))
    })?;
    let params = base_params(c, cn, ips, dns, days)?;
    let key = subject_key(c, key)?;
    let pair = key
        .key_pair()
        .map_err(|e| c.fail(format!("error creating certificate: {e}")))?;
    let cert = params
        .signed_by(&pair, &issuer)
        .map_err(|e| c.fail(format!("error creating certificate: {e}")))?;
    Ok(certificate(
        cert.pem(),
        key.to_pem().map_err(|e| c.fail(e))?,
    ))
}

/// The AES-256 key sprig makes of a password: its bytes, cut or zero-padded to 32.
fn aes_key(password: &str) -> aes::Aes256 {
    use aes::cipher::KeyInit as _;
    let mut key = [0u8; 32];
    let n = password.len().min(32);
    key[..n].copy_from_slice(&password.as_bytes()[..n]);
    aes::Aes256::new(&key.into())
}

/// sprig's `encryptAES`: AES-256-CBC, padded with the pad length, a random IV first,
/// base64.
fn encrypt_aes(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    use aes::cipher::BlockEncrypt as _;
    let (password, plain) = (str_arg(&a[0])?, str_arg(&a[1])?);
    if plain.is_empty() {
        return Ok(string(""));
    }
    if c.env.golden() {
        return Ok(string(placeholder(c.name, a)));
    }
    c.charge(plain.len().saturating_mul(3).saturating_add(64))?;
    let cipher = aes_key(password);
    let pad = 16 - plain.len() % 16;
    let mut content = plain.as_bytes().to_vec();
    content.extend(std::iter::repeat_n(u8::try_from(pad).unwrap_or(16), pad));
    let mut out = vec![0u8; 16];
    c.env.random_bytes(&mut out);
    let mut prev: [u8; 16] = out[..16].try_into().unwrap_or([0; 16]);
    for block in content.chunks(16) {
        let mut b = [0u8; 16];
        for i in 0..16 {
            b[i] = block[i] ^ prev[i];
        }
        let mut ga = b.into();
        cipher.encrypt_block(&mut ga);
        prev = ga.into();
        out.extend_from_slice(&prev);
    }
    Ok(string(
        base64::engine::general_purpose::STANDARD.encode(out),
    ))
}

fn decrypt_aes(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    use aes::cipher::BlockDecrypt as _;
    let (password, crypt64) = (str_arg(&a[0])?, str_arg(&a[1])?);
    if crypt64.is_empty() {
        return Ok(string(""));
    }
    let crypt = base64::engine::general_purpose::STANDARD
        .decode(crypt64)
        .map_err(|e| c.fail(format!("illegal base64 data: {e}")))?;
    if crypt.len() < 32 || crypt.len() % 16 != 0 {
        return Err(c.fail("crypto/cipher: input not full blocks"));
    }
    let cipher = aes_key(password);
    let mut prev: [u8; 16] = crypt[..16].try_into().unwrap_or([0; 16]);
    let mut plain = Vec::with_capacity(crypt.len() - 16);
    for block in crypt[16..].chunks(16) {
        let mut ga: aes::Block = <[u8; 16]>::try_from(block).unwrap_or([0; 16]).into();
        cipher.decrypt_block(&mut ga);
        for (i, byte) in ga.iter().enumerate() {
            plain.push(byte ^ prev[i]);
        }
        prev = block.try_into().unwrap_or([0; 16]);
    }
    let pad = usize::from(plain.last().copied().unwrap_or(0));
    if pad > plain.len() {
        return Err(c.fail(format!(
            "runtime error: slice bounds out of range [:-{}]",
            pad - plain.len()
        )));
    }
    plain.truncate(plain.len() - pad);
    Ok(string(String::from_utf8_lossy(&plain).into_owned()))
}
