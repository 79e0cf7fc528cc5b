"""Secrets in Git: SOPS-encrypted YAML, decrypted in memory with age identities."""
