"""Security: taint tracking from untrusted tools to sensitive ones, and sanitised answers."""
