"""Files of the misconfiguration matrix, shared by tests/integration/test_misconfig.py and
tests/python/test_misconfig.py (which loads this file by path)."""


def write(path, text, mode=0o644):
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def expired_process(tmp_path, rgw):
    """A config file whose profile 'old' has a credential_process handing out credentials
    that expired long ago; returns its path."""
    script = tmp_path / "expired.sh"
    write(script, "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"%s\", "
                  "\"SecretAccessKey\": \"%s\", \"SessionToken\": \"tok\", "
                  "\"Expiration\": \"2020-01-01T00:00:00Z\"}'\n"
          % (rgw.access_key, rgw.secret_key), 0o755)
    return write(tmp_path / "config-expired", f"[profile old]\ncredential_process = {script}\n")
