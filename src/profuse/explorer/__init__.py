"""The explorer: a local web app (server.py, a route table from URLs to payload builders); front end in profuse.frontend."""
