"""The API (`pelotonctl api`): the one door for people and programs, HTTP/JSON with an OpenAPI
document. Stateless: every instance reads the store and the broker and writes commands to Kafka,
so as many run as wanted. identity.py says who a request comes from, audit.py records every
decision, door.py decides with both, routes/ holds the resources (one router each: jobs, updates,
tasks, events, pools, hosts, resmgr, tokens, operations), app.py puts them together, server.py
runs it."""
