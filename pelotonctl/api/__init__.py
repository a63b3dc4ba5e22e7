"""The API (`pelotonctl api`): the one door for people and programs, HTTP/JSON with an OpenAPI
document. Stateless: every instance reads the store and the broker and writes commands to Kafka,
so as many run as wanted. identity.py says who a request comes from, audit.py records every
decision, app.py holds the resources (jobs, tasks, pools, hosts, tokens), server.py runs it."""
