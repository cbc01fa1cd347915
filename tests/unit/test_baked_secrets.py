"""Literal secrets in what ``ngym containerize`` packages are found (same key words as ``ngym.redact``), references
are not, and the refusal is one line naming the file, the key and the fix."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from ngym.containerize.baked_secrets import BakedSecret, findings_in_files, refuse_baked_secrets, secret_keys

PLANTED = "sk-planted-0123456789abcdef"


def test_literal_secrets_are_found_under_the_keys_redact_hides() -> None:
    config = {
        "env": {
            "resources_servers": {
                "env": {
                    "openai_api_key": PLANTED,
                    "session_secret": "s3cr3t-value",
                    "auth": {"headers": {"Authorization": "Bearer x"}},
                    "api_keys": ["p1", "${oc.env:P2}"],
                    "judge_api_key": "${oc.select:judge_api_key,${oc.env:JUDGE_KEY,null}}",  # a reference
                    "hf_token": "???",  # OmegaConf's "must be given"
                    "auth_token_env": "OSWORLD_TOKEN",  # the variable's name, not the secret
                    "api_key_file": "/run/secrets/key",
                    "session_cookie_name": "ngym_session",
                    "max_tokens": "512",
                    "tokenizer": "gpt2",
                    "api_key": "",
                }
            }
        }
    }
    prefix = "env.resources_servers.env."
    assert sorted(secret_keys(config)) == sorted(
        [
            f"{prefix}openai_api_key",
            f"{prefix}session_secret",
            f"{prefix}auth.headers.Authorization",
            f"{prefix}api_keys[0]",
        ]
    )


def test_wheels_and_payload_files_are_read_and_the_refusal_is_one_line(tmp_path: Path) -> None:
    wheel = tmp_path / "my_env-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("my_env/configs/my_env.yaml", f"my_env:\n  openai_api_key: {PLANTED}\n")
        archive.writestr("my_env/data/rows.json", '{"key": "not config this big"}' + " " * (2 << 20))
        archive.writestr("my_env-0.1.0.dist-info/METADATA", "Name: my_env\n")
    payload = tmp_path / "payload"
    payload.mkdir()
    (payload / ".env").write_text(f"# comment\nexport HF_TOKEN='{PLANTED}'\nPORT=8000\n")
    (payload / "settings.json").write_text('{"password": "${oc.env:PW}"}')
    (payload / "rows.json").write_text('[{"key": "a dataset field, not config"}]')  # data: not read
    assert [f.key for f in findings_in_files(payload)] == ["HF_TOKEN"]
    with pytest.raises(BakedSecret) as caught:
        refuse_baked_secrets([wheel], [payload])
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    assert message.startswith("my_env-0.1.0-py3-none-any.whl!my_env/configs/my_env.yaml holds a literal secret")
    assert "my_env.openai_api_key" in message and "(and 1 more)" in message
    assert "${oc.env:" in message and "NGYM_SESSION_SECRET_FILE" in message and "--allow-baked-secrets" in message
    assert PLANTED not in message  # the refusal never prints the secret itself
    refuse_baked_secrets([], [payload / "settings.json"])  # a reference alone passes
