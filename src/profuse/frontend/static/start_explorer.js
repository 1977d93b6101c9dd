// @ts-check
// The explorer's page: the front end over the server's HTTP API.
profuse.app.start(profuse.api.httpSource());
