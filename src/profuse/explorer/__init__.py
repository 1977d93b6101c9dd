"""The explorer: a local web app (server.py) over payloads built in data.py; front end in static/."""
