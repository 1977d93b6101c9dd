// @ts-check
// A self-contained HTML report: the front end over the payload embedded in the page.
profuse.app.start(profuse.api.embeddedSourceFrom("profuse-data"));
