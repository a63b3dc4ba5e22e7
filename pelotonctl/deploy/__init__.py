"""What deploys a cluster on machines or containers of its own: Kafka nodes, the secrets of one
cluster in one env file, and the one-shot setup of topics, users, ACLs, tokens and the first pool."""
