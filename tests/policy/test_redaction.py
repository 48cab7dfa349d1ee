"""The redaction table: every rule with positive and negative examples, many
inside Japanese text (where ``\\b`` would fail: Japanese characters are ``\\w``)."""

from __future__ import annotations

import pytest

from policy.redaction import ALL_RULES, RULES, luhn_valid, redact, rule_name

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7x\nabc+/=\n-----END RSA PRIVATE KEY-----"
PEM_PKCS8 = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
PEM_OPENSSH = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
# Pasted without the END line: the key all the same.
PEM_CUT = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7xQ3bL0p4Xh2kV9w\nZk1m8Yq2Rr/T5u+Vb0Nc3Wd4Ee5Ff6Gg\nHh7I"
PEM_CUT_ENCRYPTED = (
    "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17F5316E2BAC89\n\n"
    "hQW0pLl2nC6q0fUj9ZpT8vQ1rX3kE7bJ"
)
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GH_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"
SLACK = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_HOOK = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
SK = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
SK_ANT = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
AKIA = "AKIAIOSFODNN7EXAMPLE"

# (rule, text, the values that must disappear)
POSITIVE = [
    ("email", "連絡先はtaro.yamada@example.co.jpです。", ["taro.yamada@example.co.jp"]),
    ("email", "Mail me at a.b+tag@sub.example.com, thanks", ["a.b+tag@sub.example.com"]),
    ("email", "（問い合わせ：support@example.com）", ["support@example.com"]),
    ("phone", "電話は090-1234-5678まで", ["090-1234-5678"]),
    ("phone", "代表 03-1234-5678 にお電話ください", ["03-1234-5678"]),
    ("phone", "携帯09012345678に連絡", ["09012345678"]),
    ("phone", "call +1 (415) 555-2671 today", ["+1 (415) 555-2671"]),
    ("phone", "tel: +81-3-1234-5678.", ["+81-3-1234-5678"]),
    ("phone", "US: 415.555.2671", ["415.555.2671"]),
    ("phone", "intl +442071838750 ok", ["+442071838750"]),
    ("card_number", "カード番号4111 1111 1111 1111で決済", ["4111 1111 1111 1111"]),
    ("card_number", "card 5500-0000-0000-0004 expires", ["5500-0000-0000-0004"]),
    ("card_number", "amex 378282246310005.", ["378282246310005"]),
    ("pem_private_key", f"鍵は以下です\n{PEM}\n以上", [PEM]),
    ("pem_private_key", PEM_PKCS8, [PEM_PKCS8]),
    ("pem_private_key", f"key:{PEM_OPENSSH}", [PEM_OPENSSH]),
    ("pem_private_key", f"鍵です\n{PEM_CUT}", [PEM_CUT]),
    ("pem_private_key", f"{PEM_CUT_ENCRYPTED}\n", [PEM_CUT_ENCRYPTED]),
    ("api_key", f"OpenAIのキーは{SK}です", [SK]),
    ("api_key", f"ANTHROPIC_API_KEY={SK_ANT}", [SK_ANT]),
    ("api_key", f"stripe {STRIPE}", [STRIPE]),
    ("github_token", f"トークン{GHP}を使う", [GHP]),
    ("github_token", f"GH_TOKEN={GH_PAT}", [GH_PAT]),
    ("slack_token", f"Slackボット{SLACK}で通知", [SLACK]),
    ("slack_token", f"webhook: {SLACK_HOOK}", [SLACK_HOOK]),
    ("jwt", f"Authorization: Bearer {JWT}", [JWT]),
    ("jwt", f"認証トークン{JWT}の期限", [JWT]),
    ("aws_access_key", f"AWSキー{AKIA}は無効化済み", [AKIA]),
    ("aws_access_key", "aws_access_key_id = ASIAY34FZKBOKMUTVV7A", ["ASIAY34FZKBOKMUTVV7A"]),
]

# (rule, text that must stay as it is)
NEGATIVE = [
    ("email", "メールアドレスは未定です"),
    ("email", "user@localhost has no domain"),
    ("email", "価格は100@200円"),
    ("phone", "日付は2026-11-22です"),
    ("phone", "version 1.2.3 released"),
    ("phone", "サーバー 192.168.100.200 に接続"),
    ("phone", "注文番号12345"),
    ("phone", "時刻 12:30 に集合"),
    ("card_number", "注文番号4111 1111 1111 1112（Luhn不一致）"),
    ("card_number", "0000 0000 0000 0000"),
    ("card_number", "short 4111 1111"),
    ("pem_private_key", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"),
    ("pem_private_key", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----"),
    ("pem_private_key", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A"),
    ("api_key", "sk-short はキーではない"),
    ("api_key", "task-management-system-for-everyone-2026"),
    ("api_key", "risk-assessment-document-version-twenty"),
    ("github_token", "ghp_tooShort123"),
    ("github_token", "ghx_" + "a" * 36),
    ("slack_token", "xoxb-short"),
    ("slack_token", "xoxz-1234567890-abcdef"),
    ("jwt", "eyJhbGciOi は途中で切れている"),
    ("jwt", "a.b.c"),
    ("aws_access_key", "AKIA1234 は短い"),
    ("aws_access_key", "XAKIAIOSFODNN7EXAMPLEX"),
    ("aws_access_key", "akiaiosfodnn7example"),
]


@pytest.mark.parametrize(("rule", "text", "secrets"), POSITIVE)
def test_positive_examples_are_redacted(rule, text, secrets):
    result = redact(text, [rule])
    for value in secrets:
        assert value not in result.text, result.text
    assert f"[REDACTED:{rule}]" in result.text
    assert result.counts == {rule: len(secrets)}
    # The text around the value is kept, including Japanese.
    first = text.index(secrets[0])
    assert result.text.startswith(text[:first])


@pytest.mark.parametrize(("rule", "text"), NEGATIVE)
def test_negative_examples_are_left_alone(rule, text):
    result = redact(text, [rule])
    assert result.text == text and not result.changed


@pytest.mark.parametrize(("rule", "text"), NEGATIVE)
def test_negative_examples_are_left_alone_by_every_rule(rule, text):
    assert redact(text).text == text


def test_every_rule_has_positive_and_negative_examples():
    assert {r for r, _, _ in POSITIVE} == set(RULES) == {r for r, _ in NEGATIVE}


def test_all_rules_at_once_on_mixed_text():
    text = f"山田さん(taro@example.jp, 090-1234-5678)のカード4111-1111-1111-1111とキー{SK}、{AKIA}、{JWT}"
    result = redact(text)
    for value in ("taro@example.jp", "090-1234-5678", "4111-1111-1111-1111", SK, AKIA, JWT):
        assert value not in result.text
    assert result.text.startswith("山田さん(")
    assert set(result.counts) == {"email", "phone", "card_number", "api_key", "aws_access_key", "jwt"}


def test_a_jwt_is_replaced_whole_not_as_pieces():
    result = redact(f"token {JWT} end")
    assert result.text == "token [REDACTED:jwt] end"


def test_only_the_named_rules_run():
    text = "a@example.com 090-1234-5678"
    assert redact(text, ["email"]).text == "[REDACTED:email] 090-1234-5678"
    assert redact(text, ["phone"]).text == "a@example.com [REDACTED:phone]"


def test_aliases_and_unknown_rules():
    assert rule_name("credit_card") == "card_number" and rule_name("email") == "email" and rule_name("x") is None
    assert redact("4111111111111111", ["card"]).changed
    with pytest.raises(ValueError, match="unknown redaction rules"):
        redact("x", ["nope"])
    assert set(ALL_RULES) == set(RULES)


def test_luhn():
    assert luhn_valid("4111111111111111") and luhn_valid("378282246310005")
    assert not luhn_valid("4111111111111112")
