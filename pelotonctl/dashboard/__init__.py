"""The operators' web dashboard (`pelotonctl dashboard`): the stages' lag and throughput, pools,
jobs, hosts and why tasks wait, on one page that polls one JSON route.

    from pelotonctl.dashboard.server import serve

    running = serve(settings, store, port=8080)   # port 0: any free port (running.port)
    print(f"dashboard at {running.url}")
    running.wait()                                 # until Ctrl-C
    running.close()                                # stops the sampler and the server
"""
