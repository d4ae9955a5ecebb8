//! sprig's functions against sprig's documented results: one table row (template, expected
//! output or error) per function at least, then what a table cannot say (randomness,
//! keys and certificates, the budget, golden placeholders), and a Stage per group loaded
//! and rendered through the normal Stage load path.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};

use crate::clock::ManualClock;
use crate::template::{GoldenEnv, Renderer, StageEnv};

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2006, 1, 2, 15, 4, 5)
        .single()
        .expect("valid time")
}

fn env(seed: u64) -> StageEnv {
    let clock = Arc::new(ManualClock::new(start()));
    StageEnv::new(clock, start(), "v0.7.0")
        .with_seed(seed)
        .with_env_vars(["PATH".to_owned()])
}

fn renderer() -> Renderer {
    Renderer::new(Arc::new(env(1)))
}

fn data() -> Value {
    json!({"s": "hello world", "n": 5, "f": 1.5, "l": [1, 2, 3],
           "m": {"a": 1, "b": {"c": "d"}}, "e": "", "z": 0})
}

fn run(renderer: &Renderer, src: &str) -> Result<String, String> {
    renderer
        .parse("t", src)
        .map_err(|e| e.to_string())?
        .render(&data())
        .map_err(|e| e.to_string())
}

/// `Ok(text)`: the exact output; `Err(text)`: an error containing it.
type Row = (&'static str, Result<&'static str, &'static str>);

const STRINGS: &[Row] = &[
    ("{{ hello }}", Ok("Hello!")),
    ("{{ abbrev 5 \"hello world\" }}", Ok("he...")),
    ("{{ abbrev 3 \"hello\" }}", Ok("hello")),
    ("{{ abbrevboth 5 10 \"1234 5678 9123\" }}", Ok("...5678...")),
    (
        "{{ trunc 5 .s }}|{{ trunc -5 .s }}|{{ trunc 50 .s }}",
        Ok("hello|world|hello world"),
    ),
    ("{{ trim \"  a b \\n\" }}", Ok("a b")),
    ("{{ upper .s }} {{ lower \"ÀB\" }}", Ok("HELLO WORLD àb")),
    (
        "{{ title .s }}|{{ untitle \"Hello World\" }}",
        Ok("Hello World|hello world"),
    ),
    (
        "{{ substr 0 5 .s }}|{{ substr 6 100 .s }}|{{ substr -1 2 .s }}",
        Ok("hello|world|he"),
    ),
    (
        "{{ substr 3 1 .s }}",
        Err("error calling substr: runtime error: slice bounds out of range"),
    ),
    ("{{ repeat 3 \"ab\" }}", Ok("ababab")),
    (
        "{{ repeat -1 \"ab\" }}",
        Err("error calling repeat: strings: negative Repeat count"),
    ),
    (
        "{{ trimAll \"$\" \"$5.00$\" }} {{ trimall \"$\" \"$5$\" }}",
        Ok("5.00 5"),
    ),
    (
        "{{ trimSuffix \"-\" \"hello-\" }} {{ trimPrefix \"-\" \"-hello\" }}",
        Ok("hello hello"),
    ),
    ("{{ nospace \"hello w o r l d\" }}", Ok("helloworld")),
    ("{{ initials \"First Try\" }}", Ok("FT")),
    ("{{ swapcase \"This Is A.Test\" }}", Ok("tHIS iS a.tEST")),
    (
        "{{ snakecase \"FirstName\" }} {{ snakecase \"HTTPServer\" }}",
        Ok("first_name http_server"),
    ),
    ("{{ kebabcase \"FirstName\" }}", Ok("first-name")),
    ("{{ camelcase \"http_server\" }}", Ok("HttpServer")),
    ("{{ wrap 5 \"Hello World\" }}", Ok("Hello\nWorld")),
    (
        "{{ wrapWith 5 \"\\t\" \"Hello World\" }}",
        Ok("Hello\tWorld"),
    ),
    (
        "{{ contains \"cat\" \"catch\" }} {{ hasPrefix \"cat\" \"catch\" }} {{ hasSuffix \"cat\" \"catch\" }}",
        Ok("true true false"),
    ),
    (
        "{{ quote \"a\" 1 nil \"\\\"\" }}",
        Ok("\"a\" \"1\" \"\\\"\""),
    ),
    ("{{ squote \"a\" 1.5 }}", Ok("'a' '1.5'")),
    (
        "{{ cat \"hello\" nil \"beautiful\" 1 .l }}",
        Ok("hello beautiful 1 [1 2 3]"),
    ),
    (
        "{{ indent 2 \"a\\nb\" }}|{{ nindent 2 \"a\" }}",
        Ok("  a\n  b|\n  a"),
    ),
    (
        "{{ replace \" \" \"-\" \"I Am Henry VIII\" }}",
        Ok("I-Am-Henry-VIII"),
    ),
    (
        "{{ plural \"one\" \"many\" 1 }} {{ plural \"one\" \"many\" 2 }}",
        Ok("one many"),
    ),
    (
        "{{ split \"$\" \"foo$bar$baz\" }} {{ (split \"$\" \"foo$bar\")._1 }}",
        Ok("map[_0:foo _1:bar _2:baz] bar"),
    ),
    (
        "{{ splitn \"$\" 2 \"foo$bar$baz\" }}",
        Ok("map[_0:foo _1:bar$baz]"),
    ),
    (
        "{{ splitList \"$\" \"foo$bar$baz\" }} {{ len (splitList \"\" \"abc\") }}",
        Ok("[foo bar baz] 3"),
    ),
    (
        "{{ join \"_\" (list \"a\" \"b\" nil 1) }} {{ join \",\" \"x\" }}",
        Ok("a_b_1 x"),
    ),
    ("{{ sortAlpha (list \"b\" \"a\" 10 2) }}", Ok("[10 2 a b]")),
    (
        "{{ upper 1 }}",
        Err("wrong type for value; expected string; got int"),
    ),
    (
        "{{ upper }}",
        Err("wrong number of args for upper: want 1 got 0"),
    ),
];

const MATH: &[Row] = &[
    (
        "{{ add 1 2 3 }} {{ add1 5 }} {{ sub 5 3 }} {{ div 7 2 }} {{ mod 7 2 }} {{ mul 2 3 4 }}",
        Ok("6 6 2 3 1 24"),
    ),
    ("{{ add \"3\" 2 1.9 true nil }}", Ok("7")),
    ("{{ add \"0x10\" \"010\" \"2.0\" \"x\" }}", Ok("26")),
    (
        "{{ div 1 0 }}",
        Err("error calling div: runtime error: integer divide by zero"),
    ),
    ("{{ mod 1 0 }}", Err("integer divide by zero")),
    (
        "{{ max 1 5 3 }} {{ biggest 2 7 }} {{ min 4 2 6 }}",
        Ok("5 7 2"),
    ),
    ("{{ maxf 1 2.5 }} {{ minf 1.5 0.5 }}", Ok("2.5 0.5")),
    (
        "{{ floor 1.7 }} {{ ceil 1.2 }} {{ round 3.14159 2 }} {{ round 2.5 0 }} {{ round 2.4 0 0.3 }}",
        Ok("1 2 3.14 3 3"),
    ),
    (
        "{{ addf 1.5 2 }} {{ add1f 1.5 }} {{ subf 1.5 0.5 }} {{ mulf 1.5 2 }} {{ divf 10 4 }}",
        Ok("3.5 2.5 1 3 2.5"),
    ),
    (
        "{{ addf 0.1 0.2 }} {{ mulf 0.1 3 }} {{ divf 1 3 }}",
        Ok("0.3 0.3 0.3333333333333333"),
    ),
    ("{{ divf 1 0 }}", Err("error calling divf")),
    (
        "{{ until 3 }} {{ until -2 }} {{ untilStep 1 6 2 }} {{ untilStep 5 0 -2 }} {{ untilStep 0 5 0 }}",
        Ok("[0 1 2] [0 -1] [1 3 5] [5 3 1] []"),
    ),
    (
        "{{ seq 3 }}|{{ seq 2 -2 }}|{{ seq 0 2 10 }}|{{ seq 0 -2 -5 }}|{{ seq 0 2 -5 }}|{{ seq }}",
        Ok("1 2 3|2 1 0 -1 -2|0 2 4 6 8 10|0 -2 -4||"),
    ),
    ("{{ randInt 1 2 }}", Ok("1")),
    (
        "{{ randInt 2 2 }}",
        Err("error calling randInt: invalid argument to Intn"),
    ),
];

const DATES: &[Row] = &[
    ("{{ now }}", Ok("2006-01-02 15:04:05 +0000 UTC")),
    ("{{ now | date \"2006-01-02\" }}", Ok("2006-01-02")),
    (
        "{{ date \"Jan 2, 2006 3:04PM\" 0 }}",
        Ok("Jan 1, 1970 12:00AM"),
    ),
    (
        "{{ date \"Monday, 02-Jan-06 15:04:05.000 Z07:00 _2 002 pm\" now }}",
        Ok("Monday, 02-Jan-06 15:04:05.000 Z  2 002 pm"),
    ),
    ("{{ date \"2006\" \"not a time\" }}", Ok("2006")),
    (
        "{{ dateInZone \"2006-01-02 15:04 MST -0700\" now \"America/New_York\" }}",
        Ok("2006-01-02 10:04 EST -0500"),
    ),
    (
        "{{ date_in_zone \"15:04\" now \"Nowhere/Else\" }}",
        Ok("15:04"),
    ),
    (
        "{{ htmlDate now }} {{ htmlDateInZone now \"Asia/Tokyo\" }}",
        Ok("2006-01-02 2006-01-03"),
    ),
    (
        "{{ dateModify \"1.5h\" now }}",
        Ok("2006-01-02 16:34:05 +0000 UTC"),
    ),
    (
        "{{ date_modify \"x\" now }}",
        Ok("2006-01-02 15:04:05 +0000 UTC"),
    ),
    (
        "{{ mustDateModify \"-1m\" now | date \"15:04\" }}",
        Ok("15:03"),
    ),
    (
        "{{ must_date_modify \"x\" now }}",
        Err("time: invalid duration \"x\""),
    ),
    (
        "{{ dateModify \"1h\" \"yesterday\" }}",
        Err("wrong type for value; expected time.Time; got string"),
    ),
    (
        "{{ toDate \"2006-01-02\" \"2017-12-31\" }} {{ toDate \"2006-01-02\" \"2017-12-31\" | date \"02/01/2006\" }}",
        Ok("2017-12-31 00:00:00 +0000 UTC 31/12/2017"),
    ),
    (
        "{{ toDate \"2006-01-02\" \"bad\" }}",
        Ok("0001-01-01 00:00:00 +0000 UTC"),
    ),
    (
        "{{ toDate \"2006-01-02T15:04:05Z07:00\" \"2020-05-06T07:08:09.5+02:00\" }}",
        Ok("2020-05-06 07:08:09.5 +0200 +0200"),
    ),
    (
        "{{ toDate \"Jan _2 3:04PM\" \"Feb  3 4:05PM\" | date \"01-02 15:04\" }}",
        Ok("02-03 16:05"),
    ),
    (
        "{{ mustToDate \"2006-01-02\" \"bad\" }}",
        Err("parsing time \"bad\" as \"2006-01-02\": cannot parse \"bad\" as \"2006\""),
    ),
    ("{{ unixEpoch now }}", Ok("1136214245")),
    (
        "{{ dateModify \"-90s\" now | ago }} {{ ago 1136214145 }}",
        Ok("1m30s 1m40s"),
    ),
    (
        "{{ duration 95 }} {{ duration \"3600\" }} {{ duration 1.5 }}",
        Ok("1m35s 1h0m0s 0s"),
    ),
    (
        "{{ durationRound \"2h10m5s\" }} {{ durationRound \"400h\" }} {{ durationRound \"1000h\" }} {{ durationRound \"9000h\" }} {{ durationRound \"-3m\" }}",
        Ok("2h 16d 1mo 1y 3m"),
    ),
];

const DEFAULTS: &[Row] = &[
    (
        "{{ default \"foo\" .e }} {{ default \"foo\" \"bar\" }} {{ .missing | default 3 }}",
        Ok("foo bar 3"),
    ),
    (
        "{{ empty .e }} {{ empty .z }} {{ empty .l }} {{ empty .m }}",
        Ok("true true false false"),
    ),
    ("{{ coalesce .z .e \"x\" }}", Ok("x")),
    (
        "{{ all 1 \"a\" }} {{ all 1 \"\" }} {{ any 0 \"\" \"a\" }} {{ any }}",
        Ok("true false true false"),
    ),
    (
        "{{ ternary \"a\" \"b\" true }} {{ ternary \"a\" \"b\" false }}",
        Ok("a b"),
    ),
    ("{{ ternary \"a\" \"b\" 1 }}", Err("expected bool")),
    (
        "{{ fromJson \"{\\\"a\\\":1}\" }} {{ typeOf (fromJson \"{\\\"a\\\":1}\").a }} {{ fromJson \"x\" }}",
        Ok("map[a:1] float64 <no value>"),
    ),
    (
        "{{ mustFromJson \"x\" }}",
        Err("error calling mustFromJson"),
    ),
    (
        "{{ toJson (dict \"a\" \"<b>\") }} {{ toRawJson (dict \"a\" \"<b>\") }} {{ mustToJson 1 }} {{ mustToRawJson \"&\" }}",
        Ok("{\"a\":\"\\u003cb\\u003e\"} {\"a\":\"<b>\"} 1 \"&\""),
    ),
    (
        "{{ toPrettyJson (dict \"a\" (list 1 2) \"b\" (dict)) }}",
        Ok("{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}"),
    ),
    ("{{ mustToPrettyJson (list) }}", Ok("[]")),
    (
        "{{ deepCopy .m }} {{ mustDeepCopy .l }}",
        Ok("map[a:1 b:map[c:d]] [1 2 3]"),
    ),
    ("{{ deepCopy nil }}", Err("error calling deepCopy")),
    ("{{ fail \"boom\" }}", Err("error calling fail: boom")),
];

const ENCODING: &[Row] = &[
    (
        "{{ b64enc \"hello\" }} {{ b64dec \"aGVsbG8=\" }} {{ b64dec \"!!\" }}",
        Ok("aGVsbG8= hello illegal base64 data at input byte 0"),
    ),
    (
        "{{ b32enc \"hello\" }} {{ b32dec \"NBSWY3DP\" }}",
        Ok("NBSWY3DP hello"),
    ),
    (
        "{{ b32dec \"1\" }}",
        Ok("illegal base32 data at input byte 0"),
    ),
];

const LISTS: &[Row] = &[
    ("{{ list 1 \"a\" }} {{ tuple 1 2 }}", Ok("[1 a] [1 2]")),
    (
        "{{ first .l }} {{ rest .l }} {{ last .l }} {{ initial .l }} {{ first (list) }}",
        Ok("1 [2 3] 3 [1 2] <no value>"),
    ),
    (
        "{{ mustFirst .l }} {{ mustRest .l }} {{ mustLast .l }} {{ mustInitial .l }}",
        Ok("1 [2 3] 3 [1 2]"),
    ),
    (
        "{{ first \"x\" }}",
        Err("error calling first: Cannot find first on type string"),
    ),
    ("{{ mustLast 1 }}", Err("Cannot find last on type int")),
    (
        "{{ append .l 4 }} {{ push .l 4 }} {{ mustAppend .l 4 }} {{ mustPush (list) 1 }} {{ .l }}",
        Ok("[1 2 3 4] [1 2 3 4] [1 2 3 4] [1] [1 2 3]"),
    ),
    (
        "{{ prepend .l 0 }} {{ mustPrepend .l 0 }}",
        Ok("[0 1 2 3] [0 1 2 3]"),
    ),
    ("{{ append .m 1 }}", Err("Cannot push on type map")),
    ("{{ concat .l (list 4) (list) }}", Ok("[1 2 3 4]")),
    ("{{ concat .l 4 }}", Err("Cannot concat type int as list")),
    (
        "{{ reverse .l }} {{ mustReverse (list) }}",
        Ok("[3 2 1] []"),
    ),
    (
        "{{ uniq (list 1 1 \"1\" 2) }} {{ mustUniq (list) }}",
        Ok("[1 1 2] []"),
    ),
    (
        "{{ without .l 2 3 }} {{ mustWithout .l 9 }}",
        Ok("[1] [1 2 3]"),
    ),
    (
        "{{ has 2 .l }} {{ has 9 .l }} {{ has 1 nil }} {{ mustHas \"1\" .l }}",
        Ok("true false false false"),
    ),
    (
        "{{ slice .l 1 }} {{ slice .l 1 2 }} {{ slice .l }} {{ mustSlice .l 0 1 }}",
        Ok("[2 3] [2] [1 2 3] [1]"),
    ),
    ("{{ slice .l 2 9 }}", Err("error calling slice")),
    (
        "{{ slice \"abc\" 1 }}",
        Err("list should be type of slice or array but string"),
    ),
    (
        "{{ chunk 2 .l }} {{ mustChunk 5 .l }} {{ chunk 2 (list) }}",
        Ok("[[1 2] [3]] [[1 2 3]] []"),
    ),
    (
        "{{ compact (list 1 \"\" 0 \"a\" nil false) }} {{ mustCompact (list) }}",
        Ok("[1 a] []"),
    ),
];

const DICTS: &[Row] = &[
    (
        "{{ dict \"a\" 1 \"b\" }} {{ dict 1 2 }} {{ dict }}",
        Ok("map[a:1 b:] map[1:2] map[]"),
    ),
    ("{{ get .m \"a\" }} {{ get .m \"x\" }}|", Ok("1 |")),
    (
        "{{ set .m \"x\" 2 }} {{ unset .m \"a\" }} {{ .m }}",
        Ok("map[a:1 b:map[c:d] x:2] map[b:map[c:d]] map[a:1 b:map[c:d]]"),
    ),
    (
        "{{ $d := dict }}{{ $d = set $d \"k\" \"v\" }}{{ $d.k }}",
        Ok("v"),
    ),
    (
        "{{ hasKey .m \"a\" }} {{ hasKey .m \"x\" }} {{ hasKey nil \"a\" }}",
        Ok("true false false"),
    ),
    (
        "{{ pluck \"a\" (dict \"a\" 1) (dict \"a\" 2) (dict \"b\" 3) }}",
        Ok("[1 2]"),
    ),
    (
        "{{ keys (dict \"b\" 1 \"a\" 2) (dict \"c\" 3) }} {{ values (dict \"b\" 1 \"a\" 2) }}",
        Ok("[a b c] [2 1]"),
    ),
    (
        "{{ pick .m \"a\" \"x\" }} {{ omit .m \"a\" }}",
        Ok("map[a:1] map[b:map[c:d]]"),
    ),
    (
        "{{ merge (dict \"a\" 1 \"e\" \"\" \"n\" (dict \"x\" 1)) (dict \"a\" 2 \"b\" 3 \"e\" 4 \"n\" (dict \"x\" 5 \"y\" 2)) }}",
        Ok("map[a:1 b:3 e:4 n:map[x:1 y:2]]"),
    ),
    (
        "{{ mergeOverwrite (dict \"a\" 1 \"c\" 1) (dict \"a\" 2 \"b\" \"\" \"c\" 0) }} {{ mustMerge (dict) (dict \"a\" 1) }} {{ mustMergeOverwrite (dict \"a\" 1) (dict \"a\" 3) }}",
        Ok("map[a:2 b: c:0] map[a:1] map[a:3]"),
    ),
    (
        "{{ dig \"b\" \"c\" \"none\" .m }} {{ dig \"x\" \"y\" \"none\" .m }} {{ dig \"a\" 0 .m }}",
        Ok("d none 1"),
    ),
    (
        "{{ dig \"a\" \"b\" \"none\" .m }}",
        Err("interface conversion"),
    ),
    (
        "{{ get .l \"a\" }}",
        Err("expected map[string]interface {}; got []interface {}"),
    ),
];

const CONVERSION: &[Row] = &[
    (
        "{{ atoi \"42\" }} {{ atoi \"x\" }} {{ atoi \"0x1\" }}",
        Ok("42 0 0"),
    ),
    (
        "{{ int \"42\" }} {{ int64 3.9 }} {{ int \"0x10\" }} {{ int64 \"1.00\" }} {{ int true }}",
        Ok("42 3 16 1 1"),
    ),
    (
        "{{ float64 \"1.5\" }} {{ float64 2 }} {{ float64 \"x\" }}",
        Ok("1.5 2 0"),
    ),
    (
        "{{ toDecimal \"0777\" }} {{ toDecimal 777 }} {{ toDecimal \"9\" }}",
        Ok("511 511 0"),
    ),
    (
        "{{ toString 5 }} {{ toString 1.5 }} {{ toString 1e21 }} {{ toString nil }} {{ toString .l }}",
        Ok("5 1.5 1e+21 <nil> [1 2 3]"),
    ),
    (
        "{{ toStrings (list 1 nil \"a\") }} {{ len (toStrings \"x\") }}",
        Ok("[1 a] 1"),
    ),
    (
        "{{ typeOf 1 }} {{ typeOf \"a\" }} {{ typeOf .l }} {{ typeOf .m }} {{ typeOf 1.5 }} {{ typeOf nil }}",
        Ok("int string []interface {} map[string]interface {} float64 <nil>"),
    ),
    (
        "{{ kindOf .l }} {{ kindOf .m }} {{ kindOf true }} {{ kindOf nil }}",
        Ok("slice map bool invalid"),
    ),
    (
        "{{ kindIs \"slice\" .l }} {{ typeIs \"string\" \"a\" }} {{ typeIsLike \"*string\" \"a\" }} {{ typeIs \"int\" \"a\" }}",
        Ok("true true true false"),
    ),
    (
        "{{ deepEqual .l (list 1 2 3) }} {{ deepEqual 1 1.0 }} {{ deepEqual .m .m }}",
        Ok("true false true"),
    ),
];

const CRYPTO: &[Row] = &[
    (
        "{{ sha1sum \"Hello world!\" }}",
        Ok("d3486ae9136e7856bc42212385ea797094475802"),
    ),
    (
        "{{ sha256sum \"Hello world!\" }}",
        Ok("c0535e4be2b79ffd93291305436bf889314e4a3faec05ecffcbb7df31ad9e51a"),
    ),
    (
        "{{ sha512sum \"\" }}",
        Ok(
            "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
        ),
    ),
    ("{{ adler32sum \"Hello world!\" }}", Ok("487130206")),
    (
        "{{ derivePassword 1 \"long\" \"password\" \"user\" \"example.com\" }}",
        Ok("ZedaFaxcZaso9*"),
    ),
    (
        "{{ derivePassword 1 \"nope\" \"p\" \"u\" \"s\" }}",
        Ok("cannot find password template nope"),
    ),
    (
        "{{ encryptAES \"secretkey\" \"plaintext\" | decryptAES \"secretkey\" }}",
        Ok("plaintext"),
    ),
    (
        "{{ encryptAES \"k\" \"\" }}|{{ decryptAES \"k\" \"\" }}",
        Ok("|"),
    ),
    (
        "{{ len (bcrypt \"pw\") }} {{ hasPrefix \"$2a$10$\" (bcrypt \"pw\") }}",
        Ok("60 true"),
    ),
    (
        "{{ hasPrefix \"user:$2a$10$\" (htpasswd \"user\" \"pw\") }} {{ htpasswd \"a:b\" \"x\" }}",
        Ok("true invalid username: a:b"),
    ),
    (
        "{{ len (randBytes 3) }} {{ len (randBytes 9) }}",
        Ok("4 12"),
    ),
    ("{{ genPrivateKey \"foo\" }}", Ok("Unknown type foo")),
    (
        "{{ genPrivateKey \"dsa\" }}",
        Err("dsa keys are not supported"),
    ),
    (
        "{{ hasPrefix \"-----BEGIN EC PRIVATE KEY-----\" (genPrivateKey \"ecdsa\") }} {{ hasPrefix \"-----BEGIN PRIVATE KEY-----\" (genPrivateKey \"ed25519\") }}",
        Ok("true true"),
    ),
    (
        "{{ buildCustomCert \"x\" \"y\" }}",
        Err("unable to decode base64 certificate"),
    ),
    (
        "{{ genSelfSignedCert \"x\" (list 1) nil 3 }}",
        Err("error parsing ip: 1 is not a string"),
    ),
];

const MISC: &[Row] = &[
    (
        "{{ env \"HOME\" }}|{{ expandenv \"a${HOME}b$HOME$\" }}",
        Ok("|ab$"),
    ),
    (
        "{{ expandenv \"${}x${\" }}|{{ expandenv \"$1-$\" }}",
        Ok("x|-$"),
    ),
    (
        "{{ getHostByName \"localhost\" }}",
        Err("error calling getHostByName: DNS lookups are disabled"),
    ),
    (
        "{{ base \"/a/b.txt\" }} {{ dir \"/a/b.txt\" }} {{ clean \"a//b/../c/.\" }} {{ ext \"x.tar.gz\" }} {{ isAbs \"/a\" }}",
        Ok("b.txt /a a/c .gz true"),
    ),
    (
        "{{ osBase \"a/\" }} {{ osDir \"a\" }} {{ osClean \"/../x\" }} {{ osExt \"a.b/c\" }} {{ osIsAbs \"a\" }} {{ base \"\" }} {{ clean \"\" }}",
        Ok("a . /x  false . ."),
    ),
    (
        "{{ (semver \"v1.2.3-alpha.1+b5\").Major }} {{ (semver \"1.2\").Minor }} {{ (semver \"1.2.3-alpha.1+b5\").Prerelease }} {{ (semver \"1.2.3+b5\").Metadata }}",
        Ok("1 2 alpha.1 b5"),
    ),
    (
        "{{ semver \"x.y\" }}",
        Err("error calling semver: Invalid Semantic Version"),
    ),
    (
        "{{ semverCompare \"^1.2.0\" \"1.5.1\" }} {{ semverCompare \">=1.2 <2\" \"2.0.0\" }} {{ semverCompare \"~1.2.3\" \"1.2.9\" }} {{ semverCompare \"~1.2.3\" \"1.3.0\" }}",
        Ok("true false true false"),
    ),
    (
        "{{ semverCompare \"1.2.x\" \"1.2.7\" }} {{ semverCompare \"*\" \"1.0.0-beta\" }} {{ semverCompare \"^0.2.3\" \"0.3.0\" }} {{ semverCompare \"1.2 - 1.4.5\" \"1.4.5\" }} {{ semverCompare \">1.0 || <0.5\" \"0.4.0\" }}",
        Ok("true false false true true"),
    ),
    (
        "{{ semverCompare \">=1.0.0-0\" \"1.0.0-rc.1\" }} {{ semverCompare \"!=1.2.3\" \"1.2.4\" }} {{ semverCompare \"<=1.2\" \"1.2.9\" }} {{ semverCompare \">1.2\" \"1.2.9\" }}",
        Ok("true true true false"),
    ),
    (
        "{{ semverCompare \"bad!\" \"1.0.0\" }}",
        Err("error calling semverCompare"),
    ),
    (
        "{{ $u := urlParse \"https://user:pass@host.com:80/a%20b?q=1#frag\" }}{{ $u.scheme }} {{ $u.host }} {{ $u.hostname }} {{ $u.path }} {{ $u.query }} {{ $u.fragment }} {{ $u.userinfo }}",
        Ok("https host.com:80 host.com /a b q=1 frag user:pass"),
    ),
    ("{{ (urlParse \"mailto:a@b.c\").opaque }}", Ok("a@b.c")),
    (
        "{{ urlJoin (dict \"scheme\" \"https\" \"host\" \"h.com\" \"path\" \"/a b\" \"query\" \"a=1\" \"fragment\" \"f\") }} {{ urlJoin (dict \"scheme\" \"file\" \"path\" \"/x\") }}",
        Ok("https://h.com/a%20b?a=1#f file:///x"),
    ),
    (
        "{{ urlJoin (dict \"host\" 1) }}",
        Err("unable to parse host key, must be of type string, but int found"),
    ),
    (
        "{{ regexMatch \"^[a-z]+$\" \"abc\" }} {{ mustRegexMatch \"^[a-z]+$\" \"ab1\" }}",
        Ok("true false"),
    ),
    (
        "{{ regexFind \"[0-9]+\" \"ab12cd34\" }} {{ mustRegexFind \"x\" \"abc\" }}|",
        Ok("12 |"),
    ),
    (
        "{{ regexFindAll \"[0-9]+\" \"a1b22c333\" -1 }} {{ mustRegexFindAll \"[0-9]+\" \"a1b22c333\" 2 }}",
        Ok("[1 22 333] [1 22]"),
    ),
    (
        "{{ regexReplaceAll \"a(x*)b\" \"-ab-axxb-\" \"${1}W\" }} {{ mustRegexReplaceAll \"a(?P<x>x*)b\" \"-axb-\" \"$x$$\" }}",
        Ok("-W-xxW- -x$-"),
    ),
    (
        "{{ regexReplaceAllLiteral \"a(x*)b\" \"-ab-axxb-\" \"${1}\" }} {{ mustRegexReplaceAllLiteral \"b\" \"abc\" \"$\" }}",
        Ok("-${1}-${1}- a$c"),
    ),
    (
        "{{ regexSplit \"z+\" \"pizza\" -1 }} {{ regexSplit \"z+\" \"pizza\" 1 }} {{ mustRegexSplit \"z+\" \"pizza\" 0 }} {{ regexSplit \"\" \"abc\" -1 }}",
        Ok("[pi a] [pizza] [] [a b c]"),
    ),
    ("{{ regexQuoteMeta \"1.2*[x]\" }}", Ok("1\\.2\\*\\[x\\]")),
    (
        "{{ regexMatch \"(\" \"x\" }}",
        Err("error calling regexMatch: regexp: Compile(\"(\"): error parsing regexp"),
    ),
];

fn check_rows(rows: &[Row]) {
    let renderer = renderer();
    for (src, want) in rows {
        let got = run(&renderer, src);
        match (want, &got) {
            (Ok(want), Ok(got)) => assert_eq!(got, want, "{src}"),
            (Err(want), Err(got)) => assert!(got.contains(want), "{src}: {got}"),
            _ => panic!("{src}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn strings_group() {
    check_rows(STRINGS);
}

#[test]
fn math_group() {
    check_rows(MATH);
}

#[test]
fn dates_group() {
    check_rows(DATES);
}

#[test]
fn defaults_group() {
    check_rows(DEFAULTS);
}

#[test]
fn encoding_group() {
    check_rows(ENCODING);
}

#[test]
fn lists_group() {
    check_rows(LISTS);
}

#[test]
fn dicts_group() {
    check_rows(DICTS);
}

#[test]
fn conversion_and_reflection_group() {
    check_rows(CONVERSION);
}

#[test]
fn crypto_group() {
    check_rows(CRYPTO);
}

#[test]
fn os_network_paths_semver_url_regex_groups() {
    check_rows(MISC);
}

#[test]
fn every_sprig_function_has_a_row() {
    let all: Vec<&str> = [
        STRINGS, MATH, DATES, DEFAULTS, ENCODING, LISTS, DICTS, CONVERSION, CRYPTO, MISC,
    ]
    .iter()
    .flat_map(|rows| rows.iter().map(|(src, _)| *src))
    .collect();
    // Functions exercised outside the table.
    let elsewhere = [
        "randAlphaNum",
        "randAlpha",
        "randAscii",
        "randNumeric",
        "shuffle",
        "uuidv4",
        "genCA",
        "genCAWithKey",
        "genSelfSignedCertWithKey",
        "genSignedCert",
        "genSignedCertWithKey",
        "env",
    ];
    for name in super::names() {
        let used = all.iter().any(|src| {
            src.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| word == name)
        });
        assert!(
            used || elsewhere.contains(&name),
            "no table row calls {name}"
        );
    }
}

/// The keys of sprig v3.3.0's `genericMap` (what `sprig.TxtFuncMap()` returns).
const SPRIG_V3: &[&str] = &[
    "ago",
    "date",
    "date_in_zone",
    "date_modify",
    "dateInZone",
    "dateModify",
    "duration",
    "durationRound",
    "htmlDate",
    "htmlDateInZone",
    "must_date_modify",
    "mustDateModify",
    "mustToDate",
    "now",
    "toDate",
    "unixEpoch",
    "hello",
    "abbrev",
    "abbrevboth",
    "trunc",
    "trim",
    "upper",
    "lower",
    "title",
    "untitle",
    "substr",
    "repeat",
    "trimall",
    "trimAll",
    "trimSuffix",
    "trimPrefix",
    "nospace",
    "initials",
    "randAlphaNum",
    "randAlpha",
    "randAscii",
    "randNumeric",
    "swapcase",
    "shuffle",
    "snakecase",
    "camelcase",
    "kebabcase",
    "wrap",
    "wrapWith",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "quote",
    "squote",
    "cat",
    "indent",
    "nindent",
    "replace",
    "plural",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "adler32sum",
    "toString",
    "atoi",
    "int64",
    "int",
    "float64",
    "seq",
    "toDecimal",
    "split",
    "splitList",
    "splitn",
    "toStrings",
    "until",
    "untilStep",
    "add1",
    "add",
    "sub",
    "div",
    "mod",
    "mul",
    "randInt",
    "add1f",
    "addf",
    "subf",
    "divf",
    "mulf",
    "biggest",
    "max",
    "min",
    "maxf",
    "minf",
    "ceil",
    "floor",
    "round",
    "join",
    "sortAlpha",
    "default",
    "empty",
    "coalesce",
    "all",
    "any",
    "compact",
    "mustCompact",
    "fromJson",
    "toJson",
    "toPrettyJson",
    "toRawJson",
    "mustFromJson",
    "mustToJson",
    "mustToPrettyJson",
    "mustToRawJson",
    "ternary",
    "deepCopy",
    "mustDeepCopy",
    "typeOf",
    "typeIs",
    "typeIsLike",
    "kindOf",
    "kindIs",
    "deepEqual",
    "env",
    "expandenv",
    "getHostByName",
    "base",
    "dir",
    "clean",
    "ext",
    "isAbs",
    "osBase",
    "osClean",
    "osDir",
    "osExt",
    "osIsAbs",
    "b64enc",
    "b64dec",
    "b32enc",
    "b32dec",
    "tuple",
    "list",
    "dict",
    "get",
    "set",
    "unset",
    "hasKey",
    "pluck",
    "keys",
    "pick",
    "omit",
    "merge",
    "mergeOverwrite",
    "mustMerge",
    "mustMergeOverwrite",
    "values",
    "append",
    "push",
    "mustAppend",
    "mustPush",
    "prepend",
    "mustPrepend",
    "first",
    "mustFirst",
    "rest",
    "mustRest",
    "last",
    "mustLast",
    "initial",
    "mustInitial",
    "reverse",
    "mustReverse",
    "uniq",
    "mustUniq",
    "without",
    "mustWithout",
    "has",
    "mustHas",
    "slice",
    "mustSlice",
    "concat",
    "dig",
    "chunk",
    "mustChunk",
    "bcrypt",
    "htpasswd",
    "genPrivateKey",
    "derivePassword",
    "buildCustomCert",
    "genCA",
    "genCAWithKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "encryptAES",
    "decryptAES",
    "randBytes",
    "uuidv4",
    "semver",
    "semverCompare",
    "fail",
    "regexMatch",
    "mustRegexMatch",
    "regexFindAll",
    "mustRegexFindAll",
    "regexFind",
    "mustRegexFind",
    "regexReplaceAll",
    "mustRegexReplaceAll",
    "regexReplaceAllLiteral",
    "mustRegexReplaceAllLiteral",
    "regexSplit",
    "mustRegexSplit",
    "regexQuoteMeta",
    "urlParse",
    "urlJoin",
];

#[test]
fn the_sprig_table_is_sprig_v3_txt_func_map() {
    let mut names: Vec<&str> = super::names().collect();
    names.sort_unstable();
    let len = names.len();
    names.dedup();
    assert_eq!(names.len(), len, "a function is registered twice");
    let mut want = SPRIG_V3.to_vec();
    want.sort_unstable();
    assert_eq!(names, want);
}

#[test]
fn env_reads_only_the_variables_it_was_given() {
    let out = run(&renderer(), "{{ env \"PATH\" }}|{{ expandenv \"$PATH\" }}").expect("renders");
    let path = std::env::var("PATH").unwrap_or_default();
    assert_eq!(out, format!("{path}|{path}"));
    // Without the flag, nothing.
    let closed = Renderer::new(Arc::new(StageEnv::new(
        Arc::new(ManualClock::new(start())),
        start(),
        "v",
    )));
    assert_eq!(run(&closed, "{{ env \"PATH\" }}|").expect("renders"), "|");
}

#[test]
fn random_functions_are_seeded_by_the_env() {
    let src = "{{ randAlphaNum 12 }} {{ randAlpha 8 }} {{ randAscii 8 }} {{ randNumeric 6 }} {{ shuffle \"abcdefgh\" }} {{ uuidv4 }} {{ randBytes 8 }} {{ randInt 0 1000 }}";
    let once = |seed| run(&Renderer::new(Arc::new(env(seed))), src).expect("renders");
    let a = once(7);
    assert_eq!(a, once(7), "same seed, same values");
    assert_ne!(a, once(8), "another seed, other values");
    let parts: Vec<&str> = a.split(' ').collect();
    assert_eq!(parts[0].len(), 12);
    assert!(parts[0].chars().all(|c| c.is_ascii_alphanumeric()));
    assert!(parts[1].len() == 8 && parts[1].chars().all(|c| c.is_ascii_alphabetic()));
    assert!(parts[3].len() == 6 && parts[3].chars().all(|c| c.is_ascii_digit()));
    let mut shuffled: Vec<char> = parts
        .iter()
        .rev()
        .nth(3)
        .expect("shuffle")
        .chars()
        .collect();
    shuffled.sort_unstable();
    assert_eq!(shuffled.into_iter().collect::<String>(), "abcdefgh");
    let uuid = uuid::Uuid::parse_str(parts[parts.len() - 3]).expect("a UUID");
    assert_eq!(uuid.get_version_num(), 4);
    // A renderer's values change from call to call.
    let r = renderer();
    assert_ne!(run(&r, "{{ uuidv4 }}"), run(&r, "{{ uuidv4 }}"));
    assert_eq!(
        run(&r, "{{ randAlpha -1 }}|{{ randAlpha 0 }}").expect("renders"),
        "|"
    );
}

#[test]
fn golden_env_prints_placeholders() {
    let golden = Renderer::new(Arc::new(GoldenEnv));
    let out = run(
        &golden,
        "{{ uuidv4 }} {{ randAlphaNum 5 }} {{ randInt 1 9 }} {{ shuffle \"ab\" }} {{ randBytes 4 }} {{ bcrypt \"p\" }} {{ htpasswd \"u\" \"p\" }} {{ genPrivateKey \"rsa\" }} {{ encryptAES \"k\" \"t\" }}",
    )
    .expect("renders");
    assert_eq!(
        out,
        "<uuidv4> <randAlphaNum(5)> <randInt(1, 9)> <shuffle(\"ab\")> <randBytes(4)> <bcrypt(\"p\")> <htpasswd(\"u\", \"p\")> <genPrivateKey(\"rsa\")> <encryptAES(\"k\", \"t\")>"
    );
    let out = run(
        &golden,
        "{{ now }} {{ now | date \"2006-01-02T15:04\" }} {{ dateModify \"1h\" now | date \"15:04\" }} {{ (genCA \"ca\" 365).Cert }}",
    )
    .expect("renders");
    assert_eq!(
        out,
        "<now> 2006-01-02T15:04 16:04 <genCA(\"ca\", 365).Cert>"
    );
}

#[test]
fn sequences_and_repeats_are_charged_before_they_are_built() {
    let r = renderer();
    for src in [
        "{{ until 100000000000 }}",
        "{{ untilStep 0 9000000000000000000 1 }}",
        "{{ seq 100000000000 }}",
        "{{ repeat 100000000000 \"x\" }}",
        "{{ indent 100000000000 \"x\" }}",
        "{{ range until 1000 }}{{ $_ := repeat 100000 \"x\" }}{{ end }}",
    ] {
        let err = run(&r, src).expect_err(src);
        assert!(err.contains("over 16777216 bytes"), "{src}: {err}");
    }
    // The budget is per render: the same template renders again.
    let t = r
        .parse("t", "{{ len (repeat 10000000 \"x\") }}")
        .expect("parses");
    for _ in 0..3 {
        assert_eq!(t.render(&data()).expect("renders"), "10000000");
    }
}

#[test]
fn certificates_chain_and_read_back() {
    let r = renderer();
    let src = concat!(
        "{{ $ca := genCA \"my-ca\" 365 }}",
        "{{ $cert := genSignedCert \"svc\" (list \"10.0.0.1\") (list \"svc.ns\") 30 $ca }}",
        "{{ $self := genSelfSignedCert \"self\" nil (list \"a.b\") 10 }}",
        "{{ $built := buildCustomCert (b64enc $ca.Cert) (b64enc $ca.Key) }}",
        "{{ $ca.Cert }}SPLIT{{ $cert.Cert }}SPLIT{{ $self.Cert }}SPLIT{{ $cert.Key }}SPLIT{{ eq $built.Cert $ca.Cert }}"
    );
    let out = run(&r, src).expect("renders");
    let parts: Vec<&str> = out.split("SPLIT").collect();
    let parse = |pem: &str| {
        let (_, der) = super::crypto::parse_pem(pem).expect("PEM");
        der
    };
    let ca_der = parse(parts[0]);
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).expect("CA");
    assert!(ca.is_ca());
    assert_eq!(ca.subject().to_string(), "CN=my-ca");
    assert_eq!(ca.validity().not_before.timestamp(), start().timestamp());
    assert_eq!(
        ca.validity().not_after.timestamp(),
        start().timestamp() + 365 * 86400
    );
    let cert_der = parse(parts[1]);
    let (_, cert) = x509_parser::parse_x509_certificate(&cert_der).expect("cert");
    assert_eq!(cert.issuer().to_string(), "CN=my-ca");
    assert!(!cert.is_ca());
    cert.verify_signature(Some(ca.public_key()))
        .expect("signed by the CA");
    let san = cert.subject_alternative_name().expect("ext").expect("SAN");
    assert_eq!(san.value.general_names.len(), 2);
    let self_der = parse(parts[2]);
    let (_, own) = x509_parser::parse_x509_certificate(&self_der).expect("self-signed");
    own.verify_signature(None).expect("self-signed");
    assert!(parts[3].starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
    assert_eq!(parts[4], "true");

    // With given keys: an ECDSA CA signing a certificate for an Ed25519 key.
    let src = concat!(
        "{{ $ca := genCAWithKey \"k-ca\" 1 (genPrivateKey \"ecdsa\") }}",
        "{{ $c := genSignedCertWithKey \"k\" nil nil 1 $ca (genPrivateKey \"ed25519\") }}",
        "{{ $s := genSelfSignedCertWithKey \"s\" nil nil 1 $c.Key }}",
        "{{ hasPrefix \"-----BEGIN EC PRIVATE KEY\" $ca.Key }} {{ hasPrefix \"-----BEGIN PRIVATE KEY\" $c.Key }} {{ eq $s.Key $c.Key }}"
    );
    assert_eq!(run(&r, src).expect("renders"), "true true true");
}

#[test]
fn rsa_private_keys_are_4096_bits_and_repeat_with_the_seed() {
    let src = "{{ genPrivateKey \"rsa\" }}";
    let a = run(&Renderer::new(Arc::new(env(3))), src).expect("renders");
    assert!(a.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"), "{a}");
    use rsa::pkcs1::DecodeRsaPrivateKey as _;
    use rsa::traits::PublicKeyParts as _;
    let key = rsa::RsaPrivateKey::from_pkcs1_pem(&a).expect("PKCS#1");
    assert_eq!(key.n().bits(), 4096);
    assert_eq!(
        run(&Renderer::new(Arc::new(env(3))), src).expect("renders"),
        a
    );
}

/// A Stage whose template uses functions of one group, loaded and played through the
/// Stage load path.
fn stage_renders(template: &str, object: &Value) -> Value {
    let stage = format!(
        "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: s}}\nspec:\n  resourceRef: {{apiGroup: v1, kind: Pod}}\n  selector: {{}}\n  next:\n    statusTemplate: |\n{}\n",
        template
            .lines()
            .map(|l| format!("      {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let loaded = crate::stage::load::load_str(&stage, &renderer()).expect("YAML");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let step = loaded.stages[0]
        .steps
        .iter()
        .find_map(|s| match s {
            crate::stage::Step::Patch(p) => Some(p),
            _ => None,
        })
        .expect("a patch step");
    step.template.render_json(object).expect("renders")
}

#[test]
fn stages_of_each_group_load_and_render() {
    let pod = json!({"metadata": {"name": "web-7f9c", "labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "a", "image": "nginx:1.25"}, {"name": "b", "image": "busybox"}]}});
    let cases = [
        (
            "phase: {{ .metadata.name | trunc 3 | upper | quote }}\nmessage: {{ .metadata.name | replace \"-\" \"_\" | snakecase | quote }}",
            json!({"phase": "WEB", "message": "web_7f9c"}),
        ),
        (
            "restarts: {{ add 1 2 | mul 2 }}\nratio: {{ divf 1 4 }}",
            json!({"restarts": 6, "ratio": 0.25}),
        ),
        (
            "startTime: {{ now | date \"2006-01-02T15:04:05Z07:00\" | quote }}",
            json!({"startTime": "2006-01-02T15:04:05Z"}),
        ),
        (
            "phase: {{ .status.phase | default \"Pending\" }}\nok: {{ empty .status }}",
            json!({"phase": "Pending", "ok": true}),
        ),
        (
            "message: {{ b64enc .metadata.name }}",
            json!({"message": "d2ViLTdmOWM="}),
        ),
        (
            "images: {{ range .spec.containers }}{{ $_ := .image }}{{ end }}{{ pluck \"image\" (first .spec.containers) | toJson }}\ncount: {{ len (concat .spec.containers (list 1)) }}",
            json!({"images": ["nginx:1.25"], "count": 3}),
        ),
        (
            "labels: {{ merge (dict \"tier\" \"front\") .metadata.labels | toJson }}",
            json!({"labels": {"app": "web", "tier": "front"}}),
        ),
        (
            "hash: {{ sha256sum .metadata.name | trunc 8 | quote }}",
            json!({"hash": "9b4e1a1f"}),
        ),
        (
            "hostIP: {{ (urlParse \"http://10.1.2.3:8080/x\").hostname }}\nok: {{ semverCompare \">=1.20\" \"1.25.0\" }}\nv: {{ regexFind \"[0-9.]+\" (index .spec.containers 0).image | quote }}",
            json!({"hostIP": "10.1.2.3", "ok": true, "v": "1.25"}),
        ),
    ];
    for (template, want) in cases {
        let got = stage_renders(template, &pod);
        let want = if template.starts_with("hash") {
            // The expected digest, computed independently of the template.
            let d = ring::digest::digest(&ring::digest::SHA256, b"web-7f9c");
            let hex: String = d
                .as_ref()
                .iter()
                .take(4)
                .map(|b| format!("{b:02x}"))
                .collect();
            json!({"hash": hex})
        } else {
            want
        };
        assert_eq!(got, want, "{template}");
    }
}

#[test]
fn an_unknown_function_is_still_named_at_load() {
    let err = renderer()
        .parse("t", "{{ nosuchsprig 1 }}")
        .expect_err("unknown");
    assert!(
        err.to_string()
            .contains("function \"nosuchsprig\" not defined"),
        "{err}"
    );
}
