from corpus_common import serve
from corpus_mail.server import server

serve(server)
