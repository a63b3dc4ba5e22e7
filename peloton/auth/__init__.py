"""Who is asking and what they may do: bearer tokens (tokens.py) and pool permissions
(permissions.py). Pure: no HTTP, no Kafka; the API and the stages decide with the same code."""
